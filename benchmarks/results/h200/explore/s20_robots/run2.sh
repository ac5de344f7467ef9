#!/usr/bin/env bash
# Session 20, run 2: the in-step sweep (session 14's timeline.py, 5 interleaved rounds) of the
# QKV GEMV's launch shape alone, narrower and shorter tiles than run 1's (arms2_<shape>.txt),
# on the robot-size shapes and the 8B at ctx 2048.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader > "$OUT/gpu.txt"
cd benchmarks/results/h200/explore/s14_timeline
for arch in llama-3.2-1b qwen2.5-1.5b llama-3.2-3b llama-3.1-8b; do
  ROUNDS=5 ARMS="$(cat "$here/arms2_$arch.txt")" timeout 200 python3 timeline.py $arch 2048 \
    > "$OUT/run2_sweep_$arch.log" 2>&1
  cut -c1-120 "$OUT/run2_sweep_$arch.log"
done
