#!/usr/bin/env bash
# Session 27, run 14: the stamped op tables of v30g and v30h (cuda_timeline.py now stamps a fused
# source's five ops a layer) beside v30e's and the Triton split's, on the 8B and the 3B at 2060
# keys: which op holds run 13's loss.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run14_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
merge="$here/split_merge.cu:min_chunk=64,fused=1,-DWIDE_MERGE"
SOURCES="v30e=$here/split_cuda.cu:min_chunk=64 v30g=$merge v30h=$merge,-DLATE_TRIGGER" \
  timeout 400 python3 "$here/cuda_timeline.py" llama-3.1-8b:2060 llama-3.2-3b:2060 \
  2>&1 | grep -v -i warn | tee "$OUT/run14.log"
