#!/usr/bin/env bash
# Session 32, run 10: carveout_probe.py with SYNC=1, the attention reduce at carveout 0 (a
# kernels.py copy, as in run 7) against the package's (v38 taken out again), timed back to back
# and with each replay waited for: the 3B and the 8B at ctx 2048.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run10_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 SYNC=1
timeout 400 python3 benchmarks/results/h200/explore/s32_prefetch/carveout_probe.py \
  llama-3.2-3b:2048 llama-3.1-8b:2048 2>&1 | grep -v -i warn \
  | tee "$OUT/run10.log"
