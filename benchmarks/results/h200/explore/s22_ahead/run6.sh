#!/usr/bin/env bash
# Session 22, run 6: at the final commit (after run 4's full GPU tests, kernels.embed's refusal
# of a strided table was added), the kernel tests natively and the engine's GPU tests that need
# no embedded model (the tiny checkpoints against transformers, bf16 and 4-bit, long prompts).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader > "$OUT/gpu.txt"
timeout 400 python3 -m pytest -q -p no:cacheprovider -rs test/engine/test_kernels.py \
  test/engine/test_gpu_engine.py -k "not embedded" > "$OUT/run6_gpu_tests.log" 2>&1
tail -n 5 "$OUT/run6_gpu_tests.log"
