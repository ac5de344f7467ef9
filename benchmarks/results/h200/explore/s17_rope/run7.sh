#!/usr/bin/env bash
# Session 17, run 7: the stamped step of the submitted kernels with mark 7, when the first tile
# (loaded before the wait) has landed, 8B and 1B at ctx 2048 (timeline.py, LANDED=1).
set -uo pipefail
cd "$(dirname "$0")/../s14_timeline"
export PYTHONPATH=$(cd ../../../../.. && pwd) PYTHONUNBUFFERED=1
for arch in llama-3.1-8b llama-3.2-1b; do
  LANDED=1 timeout 100 python3 timeline.py $arch 2048 > "$OUT/run7_timeline_$arch.log" 2>&1
  tail -n 4 "$OUT/run7_timeline_$arch.log"
done
