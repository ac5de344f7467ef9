#!/usr/bin/env bash
# Session 26, run 2: v30c (split_cuda.cu here) against the package's Triton kernels: float32
# agreement, the step in 5 interleaved rounds, and both stamped per-op tables
# (cuda_timeline.py), the 8B at ctx 2048 and 16384, the 1B at 2048.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run2_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
SOURCES="v30c=$here/split_cuda.cu" timeout 300 python3 "$here/cuda_timeline.py" \
  llama-3.1-8b:2048,16384 llama-3.2-1b:2048 2>&1 | grep -v -i warn | tee "$OUT/run2.log"
