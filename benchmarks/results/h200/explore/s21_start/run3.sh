#!/usr/bin/env bash
# Session 21, run 3: inproc.py (the protocol's sessions, the tree's decoder and HEAD's from
# .carry/base/ taking turns in one process) on the 8B at ctx 2048 and 16384 and the robot-size
# shapes at 2048; then the robot-size shapes with the protocol at the tree (robots_*.json), and
# the first two parts of the embedded GGUF carried for run 4's GPU tests.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader > "$OUT/gpu.txt"
base=.carry/base/physinf_ros/engine/native.py
timeout 200 python3 "$here/inproc.py" $base 2048,16384 llama-3.1-8b > "$OUT/run3_inproc.log" 2>&1
timeout 150 python3 "$here/inproc.py" $base 2048 llama-3.2-1b qwen2.5-1.5b llama-3.2-3b \
  >> "$OUT/run3_inproc.log" 2>&1
grep -v -i warn "$OUT/run3_inproc.log" | tail -n 30
ROBOT_MODES=graphed benchmarks/run_device.sh carry robots
