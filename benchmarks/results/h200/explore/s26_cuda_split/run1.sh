#!/usr/bin/env bash
# Session 26, run 1 (carries .carry/s26, where v30.cu is split_cuda.cu at 4203af2): v30 and v30b
# (s25_warp_keys/split_cuda.cu) against the package's Triton kernels, float32 agreement and the
# step, the 8B at ctx 2048 and 16384, the 1B at 2048; then v30b built with -DMARKS, its marks in
# the step of the 8B at 2048 and the 1B at 2048.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run1_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
probe=benchmarks/results/h200/explore/s25_warp_keys/split_cuda_probe.py
v30b=benchmarks/results/h200/explore/s25_warp_keys/split_cuda.cu
SOURCES="v30=.carry/s26/v30.cu v30b=$v30b" timeout 240 python3 "$probe" \
  llama-3.1-8b:2048,16384 llama-3.2-1b:2048 2>&1 | grep -v -i warn | tee "$OUT/run1_probe.log"
SOURCES="v30b=$v30b" MARKS=1 timeout 150 python3 "$probe" llama-3.1-8b:2048 llama-3.2-1b:2048 \
  2>&1 | grep -v -i warn | tee "$OUT/run1_marks.log"
