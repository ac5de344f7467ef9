#!/usr/bin/env bash
# Session 30, run 2: v34's cost split: each shape's atomic adds as run 1, rotated (each program's
# first output tile its own), and plain stores (no atomics, a bound); all four shapes at ctx 2048.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run2_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
SHAPES='32,128,256,8 64,64,128,8 64,64,256,8' MODES='atomic rotated stores' \
  timeout 570 python3 "$here/mlp_probe.py" llama-3.2-1b:2048 llama-3.1-8b:2048 \
  qwen2.5-1.5b:2048 llama-3.2-3b:2048 2>&1 | grep -v -i warn | tee "$OUT/run2.log"
