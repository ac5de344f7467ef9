#!/usr/bin/env bash
# Session 31, run 13: three-tile splits at the protocol's 2049-2078 keys (attention
# min_chunk=192 as NEW_FLAGS: 11 splits with keys a kv head, 88 blocks, every tile in flight
# before the wait with v36's ring of 3) against the package's 64 (17 splits of two tiles, 136
# blocks), the protocol's sessions in one process (s21_start/inproc.py, 10 pairs), ctx 2048.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run13_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
NEW_FLAGS=attention.min_chunk=192 timeout 300 python3 \
  benchmarks/results/h200/explore/s21_start/inproc.py flags:attention.min_chunk=64 2048 \
  llama-3.2-1b llama-3.2-3b llama-3.1-8b 2>&1 | grep -v -i warn | tee "$OUT/run13_inproc.log"
