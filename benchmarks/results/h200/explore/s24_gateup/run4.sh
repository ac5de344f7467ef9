#!/usr/bin/env bash
# Session 24, run 4: at the package as submitted, the protocol stage (README's measured table)
# and the robot shapes by the protocol (graphed).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run4_gpu.txt"
BENCH_LIMIT=200 OUT=$OUT benchmarks/run_device.sh protocol | grep -v -i warn | tail -n 12
BENCH_LIMIT=110 ROBOT_MODES=graphed OUT=$OUT benchmarks/run_device.sh robots \
  | grep -v -i warn | tail -n 24
