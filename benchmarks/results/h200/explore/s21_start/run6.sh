#!/usr/bin/env bash
# Session 21, run 6: level.py (the same decoder, its graphs captured anew, or a fresh decoder,
# ten sessions each in turn) on the 8B at ctx 2048, in two processes.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader > "$OUT/gpu.txt"
for p in 1 2; do
  timeout 100 python3 "$here/level.py" 2048 llama-3.1-8b > "$OUT/run6_level$p.log" 2>&1
  grep -v -i warn "$OUT/run6_level$p.log" | tail -n 3
done
