#!/usr/bin/env bash
# Session 30, run 9: run 8 again, with wait_probe.py's poll through a numpy view of the row (no
# tensor op a read) as a fourth arm, whose rows are the ones checked; ctx 2048, the four shapes.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run9_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 500 python3 "$here/wait_probe.py" 2048 llama-3.1-8b llama-3.2-1b qwen2.5-1.5b \
  llama-3.2-3b 2>&1 | grep -v -i warn | tee "$OUT/run9.log"
