#!/usr/bin/env bash
# Session 30, run 6 (on runs 4-5's machine; carries the GGUF's part 4 and .whl/): the tests of
# test_gpu_engine.py that load the embedded model, at the package as submitted (v35).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run6_gpu.txt"
OUT=$OUT benchmarks/run_device.sh carry > /dev/null 2>&1   # puts the GGUF together
PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 timeout 300 python3 -m pytest -q \
  -p no:cacheprovider -rs test/engine/test_gpu_engine.py \
  -k "embedded or graphed_and_eager or overlapped_loop or each_graphed_step" 2>&1 \
  | grep -v -i warn | tee "$OUT/run6_tests.log" | tail -n 6
# Run 4's tests again: its log did not come back (the device returns at most 8 files).
PYTHONUNBUFFERED=1 timeout 240 python3 -m pytest -q -p no:cacheprovider -rs \
  test/engine/test_kernels.py test/engine/test_gpu_engine.py test/engine/test_q4.py \
  test/engine/test_gptq_engine.py \
  -k "not embedded and not graphed_and_eager and not overlapped_loop and not each_graphed_step" \
  2>&1 | grep -v -i warn | tee "$OUT/run4_tests.log" | tail -n 6
