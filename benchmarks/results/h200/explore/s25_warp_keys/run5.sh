#!/usr/bin/env bash
# Session 25, run 5: a bound on what a cheaper attention tile could save. One stamped step of
# the 8B and the 1B at ctx 2048 (session 14's timeline.py), the package's kernels and, through
# KERNELS_SOURCE, the same with the split kernel's tiles taken out (no_tiles.py), in turn.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run5_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
no_tiles=$(mktemp -d)/no_tiles_kernels.py
python3 "$here/no_tiles.py" "$no_tiles"
timeline=benchmarks/results/h200/explore/s14_timeline/timeline.py
for arch in llama-3.1-8b llama-3.2-1b; do
  timeout 80 python3 $timeline $arch 2048 > "$OUT/run5_timeline_$arch.log" 2>&1
  KERNELS_SOURCE=$no_tiles timeout 80 python3 $timeline $arch 2048 \
    > "$OUT/run5_timeline_${arch}_no_tiles.log" 2>&1
  grep -h "launches\|rope_attention\|step from" "$OUT/run5_timeline_$arch.log" \
    "$OUT/run5_timeline_${arch}_no_tiles.log" | head -n 12
done
