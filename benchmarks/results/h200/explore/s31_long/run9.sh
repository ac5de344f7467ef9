#!/usr/bin/env bash
# Session 31, run 9: release_probe.py, the bf16 GEMVs releasing the next kernel after their loop
# (residual GEMVs, QKV, gate/up, all), the step graphed in interleaved rounds: the 1B, the 3B and
# the 8B at ctx 2048.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run9_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 400 python3 benchmarks/results/h200/explore/s31_long/release_probe.py llama-3.2-1b:2048 \
  llama-3.2-3b:2048 llama-3.1-8b:2048 2>&1 | grep -v -i warn | tee "$OUT/run9.log"
