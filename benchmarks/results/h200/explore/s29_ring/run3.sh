#!/usr/bin/env bash
# Session 29, run 3: Qwen2.5-7B's attention split in the CUDA kernel (kernels.yaml's (4, 128) row)
# against the default Triton split in the protocol's sessions in one process (HEAD's package in
# .carry/pkg_base with its own kernels.yaml, s21_start/inproc.py); then the protocol on the robot
# shapes at the tree (graphed, ctx 2048, 3 sessions: robots_*.json).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run3_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
BASE_CONFIG=own timeout 300 python3 benchmarks/results/h200/explore/s21_start/inproc.py \
  .carry/pkg_base 2048,16384 qwen2.5-7b 2>&1 | grep -v -i warn | tee "$OUT/run3_inproc.log"
BENCH_LIMIT=110 ROBOT_MODES=graphed OUT=$OUT benchmarks/run_device.sh robots \
  | grep -v -i warn | tail -n 24
