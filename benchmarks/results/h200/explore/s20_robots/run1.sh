#!/usr/bin/env bash
# Session 20, run 1: session 14's timeline.py (every kernel's window in one graphed step) on the
# robot-size shapes at ctx 2048, then its in-step sweep of the GEMV launch shapes on Qwen2.5-1.5B
# and Llama-3.2-3B: for each GEMV, the four next-best shapes of session 6's isolated sweep
# (kernel_sweep_<shape>.json), in arms_<shape>.txt (written from it and config/kernels.yaml).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader > "$OUT/gpu.txt"
cd benchmarks/results/h200/explore/s14_timeline
for arch in llama-3.2-1b qwen2.5-1.5b llama-3.2-3b; do
  timeout 150 python3 timeline.py $arch 2048 > "$OUT/run1_timeline_$arch.log" 2>&1
  head -12 "$OUT/run1_timeline_$arch.log"
done
for arch in qwen2.5-1.5b llama-3.2-3b; do
  ARMS="$(cat "$here/arms_$arch.txt")" timeout 280 python3 timeline.py $arch 2048 \
    > "$OUT/run1_sweep_$arch.log" 2>&1
  cut -c1-260 "$OUT/run1_sweep_$arch.log"
done
