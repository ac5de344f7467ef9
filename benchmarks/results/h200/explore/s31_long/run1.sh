#!/usr/bin/env bash
# Session 31, run 1: the protocol's sessions of the package's decoder and of the same decoder
# with the Triton attention split (attention.cuda=0), taking turns in one process
# (s21_start/inproc.py's flags: base, 10 pairs a cell): the 4-bit 8B at ctx 2048 and 16384, the
# bf16 8B at 16384.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run1_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 500 python3 benchmarks/results/h200/explore/s21_start/inproc.py flags:attention.cuda=0 \
  2048,16384 llama-3.1-8b:gptq 2>&1 | grep -v -i warn | tee "$OUT/run1_inproc.log"
timeout 250 python3 benchmarks/results/h200/explore/s21_start/inproc.py flags:attention.cuda=0 \
  16384 llama-3.1-8b 2>&1 | grep -v -i warn | tee -a "$OUT/run1_inproc.log"
