#!/usr/bin/env bash
# Session 26, run 7: at the package as submitted, the protocol (physinf-bench) on the bf16 8B,
# graphed only (5 sessions, ctx 2048 and 16384), the robot shapes (graphed) and the 4-bit 8B
# (graphed).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run7_gpu.txt"
export PYTHONUNBUFFERED=1
timeout 150 python3 -m physinf_ros.bench.cli --model synthetic:llama-3.1-8b --modes graphed \
  --contexts 2048,16384 --sessions 5 --out "$OUT/graphed_llama-3.1-8b.json" \
  > "$OUT/run7_graphed_8b.log" 2>&1
grep -v -i warn "$OUT/run7_graphed_8b.log" | tail -n 6
BENCH_LIMIT=110 ROBOT_MODES=graphed OUT=$OUT benchmarks/run_device.sh robots \
  | grep -v -i warn | tail -n 24
timeout 150 python3 -m physinf_ros.bench.cli --model synthetic:llama-3.1-8b:gptq --modes graphed \
  --contexts 2048,16384 --sessions 3 --out "$OUT/gptq_graphed.json" > "$OUT/run7_gptq.log" 2>&1
grep -v -i warn "$OUT/run7_gptq.log" | tail -n 6
