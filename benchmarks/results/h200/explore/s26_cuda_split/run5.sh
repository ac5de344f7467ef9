#!/usr/bin/env bash
# Session 26, run 5 (with the embedded GGUF's parts 0-2 carried: this call stashes them for run
# 6's tests): the new GPU tests of the CUDA split kernel in the package (test_attention_cuda.py),
# before the full suite.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run5_gpu.txt"
benchmarks/run_device.sh carry > /dev/null 2>&1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q -p no:cacheprovider -rs test/engine/test_attention_cuda.py \
  2>&1 | grep -v -i warn | tail -n 20 | tee "$OUT/run5_attention_tests.log"
