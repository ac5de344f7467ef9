#!/usr/bin/env bash
# Session 26, run 4 (carries .carry/s26, where v30c.cu is split_cuda.cu at 2048b50): v30c and
# v30e (split_cuda.cu here) with two blocks an SM at most or as many as fit, each at the 8B's
# min_chunk (128) and at 64, against the package's Triton kernels (cuda_timeline.py).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run4_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
src=$here/split_cuda.cu
SOURCES="v30c=.carry/s26/v30c.cu v30e_sm2=$src:-DSM_BLOCKS=2 v30e=$src \
v30e_sm2_c64=$src:-DSM_BLOCKS=2,min_chunk=64 v30e_c64=$src:min_chunk=64" \
  timeout 500 python3 "$here/cuda_timeline.py" llama-3.1-8b:2048,16384 llama-3.2-1b:2048 \
  2>&1 | grep -v -i warn | tee "$OUT/run4.log"
