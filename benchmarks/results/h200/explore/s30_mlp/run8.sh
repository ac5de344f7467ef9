#!/usr/bin/env bash
# Session 30, run 8: how the host learns a synchronous step's token (wait_probe.py, before its
# numpy poll): the decoder's event wait, a spin on the event's query, and a poll of the pinned
# row; ctx 2048, the four shapes.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run8_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 500 python3 "$here/wait_probe.py" 2048 llama-3.1-8b llama-3.2-1b qwen2.5-1.5b \
  llama-3.2-3b 2>&1 | grep -v -i warn | tee "$OUT/run8.log"
