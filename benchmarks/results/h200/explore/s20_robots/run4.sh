#!/usr/bin/env bash
# Session 20, run 4: gap.py (the protocol's synchronous step against the graph's own time, and
# empty graphs' launch latency) on the four shapes at ctx 2048, then the protocol paired: the
# tree's kernels.yaml (the QKV launch shapes of runs 2-3) against HEAD's in .carry/base/, 4
# rounds, each arm first in turn, on the 8B bf16 and the robot-size shapes at ctx 2048 and 16384.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader > "$OUT/gpu.txt"
timeout 200 python3 "$here/gap.py" 2048 llama-3.2-1b qwen2.5-1.5b llama-3.2-3b llama-3.1-8b \
  > "$OUT/run4_gap.log" 2>&1
grep -v Warning "$OUT/run4_gap.log" | tail -n 12
PAIRED_MODELS="synthetic:llama-3.1-8b synthetic:llama-3.2-1b synthetic:qwen2.5-1.5b synthetic:llama-3.2-3b" \
  PAIRED_CONTEXTS=2048,16384 PAIRED_ROUNDS=4 benchmarks/run_device.sh paired
