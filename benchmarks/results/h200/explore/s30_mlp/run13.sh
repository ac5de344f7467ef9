#!/usr/bin/env bash
# Session 30, run 13: the protocol's sessions of the package as submitted (v35 and the reply
# read as it lands) and session 29's (7e5a0c1's physinf_ros/ and config/ in .carry/pkg_base/),
# taking turns in one process (s21_start/inproc.py, 10 pairs a cell): the 8B and the 1B at ctx
# 2048.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run13_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 280 python3 benchmarks/results/h200/explore/s21_start/inproc.py .carry/pkg_base 2048 \
  llama-3.2-1b llama-3.1-8b 2>&1 | grep -v -i warn | tee "$OUT/run13_inproc.log"
