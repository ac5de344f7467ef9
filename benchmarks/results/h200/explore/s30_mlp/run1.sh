#!/usr/bin/env bash
# Session 30, run 1: v34 (a layer's MLP in one kernel, mlp_probe.py) against the package in the
# step, at five launch shapes, down transposed or not; the 8B and the robot shapes at ctx 2048.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run1_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 570 python3 "$here/mlp_probe.py" llama-3.2-1b:2048 llama-3.1-8b:2048 \
  qwen2.5-1.5b:2048 llama-3.2-3b:2048 2>&1 | grep -v -i warn | tee "$OUT/run1.log"
