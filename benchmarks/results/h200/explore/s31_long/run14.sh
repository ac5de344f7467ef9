#!/usr/bin/env bash
# Session 31, run 14 (carries the embedded GGUF's parts 0-1, stashed for run 16 on the same
# machine): at the package as submitted (after engine.device.device_index replaced four copies
# of the index lookup), the GPU tests that do not load the embedded model (test_kernels.py,
# test_gpu_engine.py, test_reply_row.py, test_attention_cuda.py), as run 10.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run14_tests.log"
OUT=$OUT benchmarks/run_device.sh carry > /dev/null 2>&1   # stashes the parts
PYTHONUNBUFFERED=1 timeout 240 python3 -m pytest -q -p no:cacheprovider -rs \
  test/engine/test_kernels.py test/engine/test_gpu_engine.py test/engine/test_reply_row.py \
  test/engine/test_attention_cuda.py \
  -k "not embedded and not graphed_and_eager and not overlapped_loop and not each_graphed_step" \
  2>&1 | grep -v -i warn | tee -a "$OUT/run14_tests.log" | tail -n 6
