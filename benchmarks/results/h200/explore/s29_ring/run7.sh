#!/usr/bin/env bash
# Session 29, run 7: 16 splits for the CUDA attention split of the 8-kv-head shapes (kernels.yaml's
# (8, 128) and (8, 64) rows) against 32 (HEAD's rows, .carry/pkg_base), in the protocol's sessions
# of both in one process (s21_start/inproc.py, BASE_CONFIG=own): the 1B, the 3B and the 8B.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run7_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
BASE_CONFIG=own timeout 540 python3 benchmarks/results/h200/explore/s21_start/inproc.py \
  .carry/pkg_base 2048,16384 llama-3.2-1b llama-3.2-3b llama-3.1-8b 2>&1 | grep -v -i warn \
  | tee "$OUT/run7_inproc.log"
