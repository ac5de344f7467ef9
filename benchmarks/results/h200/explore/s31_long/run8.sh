#!/usr/bin/env bash
# Session 31, run 8: run 7's two best arms on the 3B together (the head at 4 rows and 1024-column
# tiles, QKV with two tiles ahead) against kernels.yaml's shapes, the protocol's sessions taking
# turns in one process (s21_start/inproc.py, flags: base and NEW_FLAGS, 10 pairs), ctx 2048.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run8_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
NEW_FLAGS='rms_matvec:128256:3072=4,1024,1,4 rms_matvec:5120:3072=8,256,1,4,2' timeout 200 \
  python3 benchmarks/results/h200/explore/s21_start/inproc.py flags:attention.num_stages=3 2048 \
  llama-3.2-3b 2>&1 | grep -v -i warn | tee "$OUT/run8_inproc.log"
