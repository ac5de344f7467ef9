#!/usr/bin/env bash
# Session 30, run 3: v35 (the GEMVs' atomic adds and the argmax's max relaxed, relaxed_probe.py)
# against the package in the step with the greedy head: the 8B at 2048 and 16384, the robot
# shapes at 2048.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run3_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 570 python3 "$here/relaxed_probe.py" llama-3.1-8b:2048,16384 llama-3.2-1b:2048 \
  qwen2.5-1.5b:2048 llama-3.2-3b:2048 2>&1 | grep -v -i warn | tee "$OUT/run3.log"
