#!/usr/bin/env bash
# Session 30, run 5 (on run 4's machine; carries the GGUF's parts 3-4 and .whl/): the tests of
# test_gpu_engine.py that load the embedded model, at the package as submitted (v35), then the
# protocol on the robot shapes (graphed, ctx 2048, 3 sessions: robots_*.json).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run5_gpu.txt"
OUT=$OUT benchmarks/run_device.sh carry > /dev/null 2>&1   # puts the GGUF together
PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 timeout 200 python3 -m pytest -q \
  -p no:cacheprovider -rs test/engine/test_gpu_engine.py \
  -k "embedded or graphed_and_eager or overlapped_loop or each_graphed_step" 2>&1 \
  | grep -v -i warn | tee "$OUT/run5_tests.log" | tail -n 6
BENCH_LIMIT=110 ROBOT_MODES=graphed OUT=$OUT benchmarks/run_device.sh robots \
  | grep -v -i warn | tail -n 24
