#!/usr/bin/env bash
# Session 27, run 16: run 15's 64 splits with a reduce kernel that reads only the splits holding
# keys (cuda_timeline.py's masked=1: their count from pos, read before the wait), and that reduce
# alone at 32 splits; against 32 splits with the package's reduce and the Triton split, at 2060
# and 16400 keys on the 8B, 2060 on the 1B and the 3B.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run16_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
src="$here/split_cuda.cu:min_chunk=64"
SOURCES="s32=$src s32m=$src,masked=1 s64m=$src,splits=64,masked=1 \
s64k48m=$src,splits=64,-DKEY_SPLITS=48,masked=1" \
  timeout 500 python3 "$here/cuda_timeline.py" llama-3.1-8b:2060,16400 llama-3.2-1b:2060 \
  llama-3.2-3b:2060 2>&1 | grep -v -i warn | tee "$OUT/run16.log"
