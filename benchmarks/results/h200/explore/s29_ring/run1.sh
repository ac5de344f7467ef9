#!/usr/bin/env bash
# Session 29, run 1: v33 (the GEMVs' tiles kept in flight across the loop) against the package in
# the step (ring_probe.py): every GEMV, all but gate/up, all but QKV, and each alone, on the 8B at
# 2048 and 16384 and the robot shapes at 2048.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run1_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 560 python3 "$here/ring_probe.py" llama-3.1-8b:2048,16384 llama-3.2-1b:2048 \
  llama-3.2-3b:2048 qwen2.5-1.5b:2048 2>&1 | grep -v -i warn | tee "$OUT/run1.log"
