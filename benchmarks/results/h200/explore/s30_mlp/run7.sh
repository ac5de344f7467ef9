#!/usr/bin/env bash
# Session 30, run 7: the residual GEMVs' (o_proj, down) and the head's launch shapes re-swept in
# the step at v35 (session 14's timeline.py in sweep mode, arms7_<shape>.txt, 3 interleaved
# rounds, each arm's per-op table), ctx 2048: the 1B and the 8B.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run7_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
cd benchmarks/results/h200/explore/s14_timeline
for arch in llama-3.2-1b llama-3.1-8b; do
  ARMS="$(cat "$here/arms7_$arch.txt")" timeout 260 python3 timeline.py $arch 2048 2>&1 \
    | grep -v -i warn > "$OUT/run7_sweep_$arch.log"
  cut -c1-120 "$OUT/run7_sweep_$arch.log"
done
