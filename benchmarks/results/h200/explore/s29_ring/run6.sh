#!/usr/bin/env bash
# Session 29, run 6 (after two `benchmarks/run_device.sh carry` calls with the embedded GGUF's
# parts 0-1 and 2-3; this call carries part 4 and .whl/): the tests of test_gpu_engine.py that
# load the embedded model, which run 5 could not (4 failed there for the missing model, 4 were
# deselected), at the package as submitted.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run6_gpu.txt"
OUT=$OUT benchmarks/run_device.sh carry > /dev/null 2>&1   # puts the GGUF together
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
timeout 500 python3 -m pytest -q -p no:cacheprovider -rs test/engine/test_gpu_engine.py \
  -k "embedded or graphed_and_eager or overlapped_loop or each_graphed_step" 2>&1 \
  | grep -v -i warn | tee "$OUT/run6_tests.log" | tail -8
