#!/usr/bin/env bash
# Session 27, run 13: v30h (split_merge.cu with -DWIDE_MERGE -DLATE_TRIGGER: the next kernel
# launched by the merging block) against v30g (without LATE_TRIGGER), v30e (split_cuda.cu, the
# package's kernel) and the Triton split, min_chunk 64, at the protocol's lengths, on the 8B, the
# 1B and the 3B.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run13_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
merge="$here/split_merge.cu:min_chunk=64,fused=1,-DWIDE_MERGE"
SOURCES="v30e=$here/split_cuda.cu:min_chunk=64 v30g=$merge v30h=$merge,-DLATE_TRIGGER" \
  timeout 400 python3 "$here/cuda_timeline.py" llama-3.1-8b:2060,16400 llama-3.2-1b:2060 \
  llama-3.2-3b:2060 2>&1 | grep -v -i warn | tee "$OUT/run13.log"
