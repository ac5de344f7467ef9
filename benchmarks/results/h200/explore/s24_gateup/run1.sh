#!/usr/bin/env bash
# Session 24, run 1: gate/up's two weight streams against one blocked stream and the one-stream
# rms_matvec over the same bytes (probe.py), on the four paper shapes. Run 2 is this script
# again ($1 = run2) after probe.py gained the arms of several blocks a program.
set -uo pipefail
run=${1:-run1}
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/${run}_gpu.txt"
timeout 400 python3 benchmarks/results/h200/explore/s24_gateup/probe.py \
  llama-3.1-8b llama-3.2-1b llama-3.2-3b qwen2.5-1.5b > "$OUT/${run}_probe.log" 2>&1
grep -v -i warn "$OUT/${run}_probe.log"
