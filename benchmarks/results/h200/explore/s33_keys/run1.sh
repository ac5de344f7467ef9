#!/usr/bin/env bash
# Session 32, run 11: carveout_probe.py with V38=1: the attention reduce at carveout 0 as run 7
# set it (a kernels.py copy) and as v38 set it (v38_kernels.diff, reduce_carveout 0 and -1),
# against the package's step, back to back: the 3B at ctx 2048.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run11_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 V38=1
timeout 400 python3 benchmarks/results/h200/explore/s32_prefetch/carveout_probe.py \
  llama-3.2-3b:2048 2>&1 | grep -v -i warn \
  | tee "$OUT/run11.log"
