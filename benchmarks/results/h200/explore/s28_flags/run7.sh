#!/usr/bin/env bash
# Session 28, run 7: QKV counted on down with one part and with 4, waiting and never waiting, and
# with 8 replicas of each counter; all three with 8 replicas; against the package, QKV free and
# the bound (waits_probe.py), on the 8B at 2048 and the 1B.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run7_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 400 python3 "$here/waits_probe.py" llama-3.1-8b:2048 llama-3.2-1b:2048 \
  2>&1 | grep -v -i warn | tee "$OUT/run7.log"
