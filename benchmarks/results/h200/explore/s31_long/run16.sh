#!/usr/bin/env bash
# Session 31, run 16 (on runs 14-15's machine; carries the GGUF's part 4 and .whl/): the tests
# that load the embedded model (test_gpu_engine.py's, which run graphed and eager decoders, the
# overlapped loop and each graphed step against transformers, and test_gptq_engine.py's), at
# the package as submitted.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run16_gpu.txt"
OUT=$OUT benchmarks/run_device.sh carry > /dev/null 2>&1   # puts the GGUF together
PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 timeout 300 python3 -m pytest -q \
  -p no:cacheprovider -rs test/engine/test_gpu_engine.py test/engine/test_gptq_engine.py \
  -k "embedded or graphed_and_eager or overlapped_loop or each_graphed_step or gptq" 2>&1 \
  | grep -v -i warn | tee "$OUT/run16_tests.log" | tail -n 6
