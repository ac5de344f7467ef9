#!/usr/bin/env bash
# Session 31, run 4 (carries the embedded GGUF's parts 0-1, stashed for run 6 on the same
# machine): at the package as submitted (v36, the CUDA attention split's ring of 3 key tiles),
# the GPU tests that do not load the embedded model (test_kernels.py, test_gpu_engine.py,
# test_reply_row.py, test_attention_cuda.py), then the protocol graphed on the bf16 8B (5
# sessions) and the 4-bit 8B (3 sessions), ctx 2048 and 16384. The GPU's facts head the tests'
# log (the device returns at most 8 files).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run4_tests.log"
OUT=$OUT benchmarks/run_device.sh carry > /dev/null 2>&1   # stashes the parts
export PYTHONUNBUFFERED=1
timeout 240 python3 -m pytest -q -p no:cacheprovider -rs test/engine/test_kernels.py \
  test/engine/test_gpu_engine.py test/engine/test_reply_row.py test/engine/test_attention_cuda.py \
  -k "not embedded and not graphed_and_eager and not overlapped_loop and not each_graphed_step" \
  2>&1 | grep -v -i warn | tee -a "$OUT/run4_tests.log" | tail -n 6
timeout 150 python3 -m physinf_ros.bench.cli --model synthetic:llama-3.1-8b --modes graphed \
  --contexts 2048,16384 --sessions 5 --out "$OUT/graphed_llama-3.1-8b.json" \
  > "$OUT/run4_graphed_8b.log" 2>&1
grep -v -i warn "$OUT/run4_graphed_8b.log" | tail -n 6
timeout 150 python3 -m physinf_ros.bench.cli --model synthetic:llama-3.1-8b:gptq --modes graphed \
  --contexts 2048,16384 --sessions 3 --out "$OUT/gptq_graphed.json" > "$OUT/run4_gptq.log" 2>&1
grep -v -i warn "$OUT/run4_gptq.log" | tail -n 6
