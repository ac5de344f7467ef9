#!/usr/bin/env bash
# Session 32, run 5: carveout_probe.py with MOST_L1=1, the Triton kernels asking for the most L1
# (carveout 0), the CUDA split as the driver gives it, against the package's step: the 1B, the
# 3B and the 8B at ctx 2048.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run5_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MOST_L1=1
timeout 400 python3 benchmarks/results/h200/explore/s32_prefetch/carveout_probe.py \
  llama-3.2-1b:2048 llama-3.2-3b:2048 llama-3.1-8b:2048 2>&1 | grep -v -i warn \
  | tee "$OUT/run5.log"
