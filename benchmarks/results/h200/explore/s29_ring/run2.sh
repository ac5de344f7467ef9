#!/usr/bin/env bash
# Session 29, run 2: Qwen2.5-1.5B's attention split in the CUDA kernel (kernels.yaml's row with
# cuda: true) against the Triton split: the probe (each arm against ops_torch at 8 positions,
# then the layers and head graphed at 2048 and 16384, 5 rounds), then the protocol's sessions of
# the tree's decoder and HEAD's in one process (.carry/pkg_base, s21_start/inproc.py).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run2_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
ROUNDS=5 ARMS="tree;attention.cuda=0" timeout 200 python3 \
  benchmarks/results/h200/explore/s14_attention/probe.py 16384 qwen2.5-1.5b 2>&1 \
  | grep -v -i warn | tee "$OUT/run2_probe.log"
BASE_CONFIG=own timeout 360 python3 benchmarks/results/h200/explore/s21_start/inproc.py \
  .carry/pkg_base 2048,16384 qwen2.5-1.5b 2>&1 | grep -v -i warn | tee "$OUT/run2_inproc.log"
