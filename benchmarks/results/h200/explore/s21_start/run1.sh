#!/usr/bin/env bash
# Session 21, run 1: probe.py (six ways of taking one synchronous step, start event inside the
# graph among them) on the four shapes at ctx 2048 and the 8B at 16384, then the protocol
# paired: the tree's native.py (the start event in the graph) against HEAD's in .carry/base/,
# 4 rounds, each arm first in turn, on the 8B bf16 and the robot-size shapes at ctx 2048, 16384.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader > "$OUT/gpu.txt"
timeout 150 python3 "$here/probe.py" 2048 llama-3.2-1b qwen2.5-1.5b llama-3.2-3b \
  > "$OUT/run1_probe.log" 2>&1
timeout 100 python3 "$here/probe.py" 2048,16384 llama-3.1-8b >> "$OUT/run1_probe.log" 2>&1
grep -v Warning "$OUT/run1_probe.log" | tail -n 40
PAIRED_MODELS="synthetic:llama-3.1-8b synthetic:llama-3.2-1b synthetic:qwen2.5-1.5b synthetic:llama-3.2-3b" \
  PAIRED_CONTEXTS=2048,16384 PAIRED_ROUNDS=4 benchmarks/run_device.sh paired
