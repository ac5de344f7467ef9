#!/usr/bin/env bash
# Session 27, run 15: the package's CUDA split (v30e, split_cuda.cu) with 64 splits a kv head
# instead of 32, so that at the protocol's lengths just past 2048 keys each split takes one tile
# (32 splits take two there), alone and with the keys spread over at most 48 or 40 of them
# (-DKEY_SPLITS) to keep one wave of blocks at 16384; min_chunk 64, against 32 splits and the
# Triton split, at 2060 and 16400 keys on the 8B, 2060 on the 1B and the 3B.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run15_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
src="$here/split_cuda.cu:min_chunk=64"
SOURCES="s32=$src s64=$src,splits=64 s64k48=$src,splits=64,-DKEY_SPLITS=48 \
s64k40=$src,splits=64,-DKEY_SPLITS=40" \
  timeout 500 python3 "$here/cuda_timeline.py" llama-3.1-8b:2060,16400 llama-3.2-1b:2060 \
  llama-3.2-3b:2060 2>&1 | grep -v -i warn | tee "$OUT/run15.log"
