#!/usr/bin/env bash
# Session 23, run 6: at the package as submitted, the robot shapes by the protocol (graphed) and
# our graphed GPTQ on the 4-bit synthetic 8B (3 sessions, ctx 2048 and 16384:
# ../../gptq_graphed.json).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader > "$OUT/gpu.txt"
BENCH_LIMIT=120 ROBOT_MODES=graphed OUT=$OUT benchmarks/run_device.sh robots \
  | grep -v -i warn | tail -n 24
timeout 200 python3 -m physinf_ros.bench.cli --model synthetic:llama-3.1-8b:gptq --modes graphed \
  --contexts 2048,16384 --sessions 3 --out "$OUT/gptq_graphed.json" > "$OUT/run6_gptq.log" 2>&1
grep -v -i warn "$OUT/run6_gptq.log" | tail -n 6
