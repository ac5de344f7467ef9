#!/usr/bin/env bash
# Session 27, run 12: v30g (split_merge.cu with -DWIDE_MERGE: the last block's merge of the
# splits with its loads in flight at once) against v30e (split_cuda.cu, the package's kernel) and
# the Triton split, min_chunk 64, at the protocol's lengths, on the 8B, the 1B and the 3B.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run12_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
SOURCES="v30e=$here/split_cuda.cu:min_chunk=64 v30g=$here/split_merge.cu:min_chunk=64,fused=1,-DWIDE_MERGE" \
  timeout 400 python3 "$here/cuda_timeline.py" llama-3.1-8b:2060,16400 llama-3.2-1b:2060 \
  llama-3.2-3b:2060 2>&1 | grep -v -i warn | tee "$OUT/run12.log"
