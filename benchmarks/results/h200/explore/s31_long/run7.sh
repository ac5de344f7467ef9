#!/usr/bin/env bash
# Session 31, run 7: the 3B's GEMV and head launch shapes re-swept in the step at v35-v36
# (session 14's timeline.py in sweep mode, arms7_llama-3.2-3b.txt, 3 interleaved rounds, each
# arm's per-op table; its step runs the Triton attention split), ctx 2048.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run7_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
cd benchmarks/results/h200/explore/s14_timeline
ARMS="$(cat "$here/arms7_llama-3.2-3b.txt")" timeout 400 python3 timeline.py llama-3.2-3b 2048 \
  2>&1 | grep -v -i warn > "$OUT/run7_sweep_llama-3.2-3b.log"
cut -c1-120 "$OUT/run7_sweep_llama-3.2-3b.log" | grep -v "^ "
