#!/usr/bin/env bash
# Session 24, run 7: row-major against tile-major weights for the 8B's GEMVs (probe_tiles.py).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run7_gpu.txt"
timeout 300 python3 benchmarks/results/h200/explore/s24_gateup/probe_tiles.py \
  > "$OUT/run7_probe_tiles.log" 2>&1
grep -v -i warn "$OUT/run7_probe_tiles.log"
