#!/usr/bin/env bash
# Session 25, run 6: which part of the split kernel's tile costs it. One stamped step of the 8B
# and the 1B at ctx 2048 (session 14's timeline.py), the package's kernels and, through
# KERNELS_SOURCE, tile_parts.py's three variants (q·kᵀ, the softmax or p·v taken out), in turn.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run6_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
parts=$(mktemp -d)
(cd "$here" && python3 tile_parts.py "$parts")
timeline=benchmarks/results/h200/explore/s14_timeline/timeline.py
for arch in llama-3.1-8b llama-3.2-1b; do
  timeout 60 python3 $timeline $arch 2048 > "$OUT/run6_timeline_$arch.log" 2>&1
  for part in no_qk no_softmax no_pv; do
    KERNELS_SOURCE=$parts/$part.py timeout 60 python3 $timeline $arch 2048 \
      > "$OUT/run6_timeline_${arch}_$part.log" 2>&1
  done
  grep -H "step from\|^attn split" "$OUT"/run6_timeline_$arch*.log | sed "s#$OUT/##"
done
