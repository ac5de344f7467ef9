#!/usr/bin/env bash
# Session 25, run 7: v30 (split_cuda.cu, v16c's split kernel without clusters, partials merged
# by the package's Triton reduce) against the package's Triton kernels: float32 agreement, then
# the step (split_cuda_probe.py), the 8B at ctx 2048 and 16384, the 1B at 2048.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run7_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 170 python3 "$here/split_cuda_probe.py" llama-3.1-8b:2048,16384 llama-3.2-1b:2048 \
  2>&1 | grep -v -i warn | tee "$OUT/run7_split_cuda_probe.log"
