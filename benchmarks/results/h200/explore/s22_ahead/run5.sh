#!/usr/bin/env bash
# Session 22, run 5: at the package as submitted, our graphed GPTQ on the 4-bit synthetic 8B by
# the protocol (3 sessions, ctx 2048 and 16384: ../../gptq_graphed.json), and a second process
# of the bf16 8B's graphed protocol cells (5 sessions) beside run 4's.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader > "$OUT/gpu.txt"
timeout 200 python3 -m physinf_ros.bench.cli --model synthetic:llama-3.1-8b:gptq --modes graphed \
  --contexts 2048,16384 --sessions 3 --out "$OUT/gptq_graphed.json" > "$OUT/run5_gptq.log" 2>&1
grep -v -i warn "$OUT/run5_gptq.log" | tail -n 6
timeout 150 python3 -m physinf_ros.bench.cli --model synthetic:llama-3.1-8b --modes graphed \
  --contexts 2048,16384 --sessions 5 --out "$OUT/run5_protocol_graphed.json" \
  > "$OUT/run5_protocol.log" 2>&1
grep -v -i warn "$OUT/run5_protocol.log" | tail -n 5
