#!/usr/bin/env bash
# Session 26, run 3 (carries .carry/s26, where v30c.cu is split_cuda.cu at 2048b50): v30c, v30d
# (split_cuda.cu here) and v30d with MIN_BLOCKS=4 against the package's Triton kernels, as run 2
# (cuda_timeline.py, now also printing when the split's programs reach the wait and are
# released).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run3_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
SOURCES="v30c=.carry/s26/v30c.cu v30d=$here/split_cuda.cu v30d_min4=$here/split_cuda.cu:-DMIN_BLOCKS=4" \
  timeout 400 python3 "$here/cuda_timeline.py" llama-3.1-8b:2048,16384 llama-3.2-1b:2048 \
  2>&1 | grep -v -i warn | tee "$OUT/run3.log"
