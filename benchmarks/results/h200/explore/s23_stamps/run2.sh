#!/usr/bin/env bash
# Session 23, run 2: what the synchronous step spends outside the device's own time, at v26
# (probe.py: the protocol's step, the same without the token's copy, two steps in flight, and
# the kernels' own step_ms), the robot shapes and the 8B at ctx 2048. Its log is named after
# the run given as $1 (run 4 runs this script again at v27: run4.sh).
set -uo pipefail
run=${1:-run2}
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader > "$OUT/gpu.txt"
timeout 300 python3 benchmarks/results/h200/explore/s23_stamps/probe.py 2048 \
  llama-3.2-1b qwen2.5-1.5b llama-3.2-3b llama-3.1-8b > "$OUT/${run}_probe.log" 2>&1
grep -v -i warn "$OUT/${run}_probe.log"
