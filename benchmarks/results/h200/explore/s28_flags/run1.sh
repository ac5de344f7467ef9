#!/usr/bin/env bash
# Session 28, run 1: the bound on each GEMV's wait for its predecessor (waits_probe.py): the step
# with one GEMV kind launched without its PDL wait, on the 8B at 2048 and 16384 and the robot
# shapes at 2048.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run1_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 540 python3 "$here/waits_probe.py" llama-3.1-8b:2048,16384 llama-3.2-1b:2048 \
  llama-3.2-3b:2048 2>&1 | grep -v -i warn | tee "$OUT/run1.log"
