#!/usr/bin/env bash
# Session 31, run 5 (on run 4's machine; carries the embedded GGUF's parts 2-3, stashed for
# run 6): the protocol on the robot shapes at the package as submitted (graphed, ctx 2048, 3
# sessions: robots_*.json).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run5_gpu.txt"
BENCH_LIMIT=110 ROBOT_MODES=graphed OUT=$OUT benchmarks/run_device.sh carry robots \
  | grep -v -i warn | tail -n 24
