#!/usr/bin/env bash
# Session 28, run 2: v32b (counted.py: a part's counter read one part ahead with a plain load,
# a spin only if it is short), each counted GEMV alone and all three at 2, 4 and one tile a part,
# against the package and the no-wait bound (waits_probe.py).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run2_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 400 python3 "$here/waits_probe.py" llama-3.1-8b:2048,16384 llama-3.2-1b:2048 \
  llama-3.2-3b:2048 2>&1 | grep -v -i warn | tee "$OUT/run2.log"
