#!/usr/bin/env bash
# Session 32, run 1: prefetch_probe.py, o_proj and QKV on prefetch_gemv.cu (v37: a block's whole
# weight slice bulk-copied into shared memory before its PDL wait) against the package's step:
# the 1B, Qwen2.5-1.5B and the 3B at ctx 2048.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run1_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 500 python3 benchmarks/results/h200/explore/s32_prefetch/prefetch_probe.py \
  llama-3.2-1b:2048 qwen2.5-1.5b:2048 llama-3.2-3b:2048 2>&1 | grep -v -i warn \
  | tee "$OUT/run1.log"
