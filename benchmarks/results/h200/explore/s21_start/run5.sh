#!/usr/bin/env bash
# Session 21, run 5: placement.py (new copies of the 8B's weights in one process, one allocation
# per tensor or one arena, the protocol's sessions on each) in two processes at ctx 2048; then
# settle.py at ctx 16384 with the GPU's clocks sampled every 20 ms beside it; then the
# `protocol` stage at the package as submitted (README's measured table).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader > "$OUT/gpu.txt"
for p in 1 2; do
  timeout 120 python3 "$here/placement.py" 2048 llama-3.1-8b > "$OUT/run5_placement$p.log" 2>&1
  grep -v -i warn "$OUT/run5_placement$p.log" | tail -n 3
done
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \
  --format=csv -lms 20 > "$OUT/run5_clocks.csv" 2>&1 &
smi=$!
timeout 100 python3 "$here/settle.py" 16384 llama-3.1-8b > "$OUT/run5_settle.log" 2>&1
kill $smi
date +%s.%N
head -3 "$OUT/run5_clocks.csv"; wc -l "$OUT/run5_clocks.csv"
grep -v -i warn "$OUT/run5_settle.log" | awk 'NR % 15 == 1'
BENCH_LIMIT=230 benchmarks/run_device.sh protocol
