#!/usr/bin/env bash
# Session 26, run 11 (prepared in session 26, run as session 27's first device call): v30f
# (split_merge.cu, the splits merged in the kernel's last block of each kv head) against v30e
# (split_cuda.cu, the package's kernel) and the Triton split, min_chunk 64, at the protocol's
# lengths (2060 and 16400 keys, not the round 2048 and 16384 of runs 1-4).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run11_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
SOURCES="v30e=$here/split_cuda.cu:min_chunk=64 v30f=$here/split_merge.cu:min_chunk=64,fused=1" \
  timeout 400 python3 "$here/cuda_timeline.py" llama-3.1-8b:2060,16400 llama-3.2-1b:2060 \
  2>&1 | grep -v -i warn | tee "$OUT/run11.log"
