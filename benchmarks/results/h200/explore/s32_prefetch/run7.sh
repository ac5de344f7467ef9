#!/usr/bin/env bash
# Session 32, run 7: carveout_probe.py with REDUCE_SWEEP=1, the attention reduce's carveout alone
# at 0, 25, 50 and 75, against the package's
# step: the 1B, the 3B and the 8B at ctx 2048.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run7_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 REDUCE_SWEEP=1
timeout 400 python3 benchmarks/results/h200/explore/s32_prefetch/carveout_probe.py \
  llama-3.2-1b:2048 llama-3.2-3b:2048 llama-3.1-8b:2048 2>&1 | grep -v -i warn \
  | tee "$OUT/run7.log"
