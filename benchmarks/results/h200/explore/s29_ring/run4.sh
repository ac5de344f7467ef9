#!/usr/bin/env bash
# Session 29, run 4: 64 splits for the CUDA attention split of Qwen2.5-1.5B and Qwen2.5-7B
# (kernels.yaml's (2, 128) and (4, 128) rows), against 32 (HEAD's rows, .carry/pkg_base): the
# probe on Qwen2.5-1.5B (each arm against ops_torch, then the layers and head graphed, 5 rounds),
# then the protocol's sessions of both in one process (s21_start/inproc.py, BASE_CONFIG=own).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run4_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
ROUNDS=5 ARMS="tree;attention.splits=32" timeout 150 python3 \
  benchmarks/results/h200/explore/s14_attention/probe.py 16384 qwen2.5-1.5b 2>&1 \
  | grep -v -i warn | tee "$OUT/run4_probe.log"
BASE_CONFIG=own timeout 400 python3 benchmarks/results/h200/explore/s21_start/inproc.py \
  .carry/pkg_base 2048,16384 qwen2.5-1.5b qwen2.5-7b 2>&1 | grep -v -i warn \
  | tee "$OUT/run4_inproc.log"
