#!/usr/bin/env bash
# Session 32, run 2: prefetch_probe.py with WINDOWS=1: o_proj on prefetch_gemv.cu with its copies
# before the wait and after it, the step in interleaved rounds, and each one's blocks stamped
# (placed, released, done): the 1B and the 3B at ctx 2048.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run2_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 WINDOWS=1
timeout 500 python3 benchmarks/results/h200/explore/s32_prefetch/prefetch_probe.py \
  llama-3.2-1b:2048 llama-3.2-3b:2048 2>&1 | grep -v -i warn | tee "$OUT/run2.log"
