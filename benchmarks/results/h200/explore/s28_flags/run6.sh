#!/usr/bin/env bash
# Session 28, run 6: v32f (counters read with acquire loads, inputs through L1), the
# producers' adds alone and the consumers' checks alone, against the package and the bound
# (waits_probe.py), on the 8B at 2048 and the 1B.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run6_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 400 python3 "$here/waits_probe.py" llama-3.1-8b:2048 llama-3.2-1b:2048 \
  2>&1 | grep -v -i warn | tee "$OUT/run6.log"
