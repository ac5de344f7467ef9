#!/usr/bin/env bash
# Session 21, run 2: probe.py again (run 1's probe stopped at a tensor made in inference mode),
# with the untimed-wait arms added, on the four shapes at ctx 2048 and the 8B at 16384.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader > "$OUT/gpu.txt"
timeout 200 python3 "$here/probe.py" 2048 llama-3.2-1b qwen2.5-1.5b llama-3.2-3b \
  > "$OUT/run2_probe.log" 2>&1
timeout 150 python3 "$here/probe.py" 2048,16384 llama-3.1-8b >> "$OUT/run2_probe.log" 2>&1
grep -v Warning "$OUT/run2_probe.log" | grep -v "^ *warn" | tail -n 60
