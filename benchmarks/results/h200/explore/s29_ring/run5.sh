#!/usr/bin/env bash
# Session 29, run 5: at the package as submitted (kernels.yaml's CUDA attention rows for
# Qwen2.5-1.5B and Qwen2.5-7B), the GPU tests that reach them: test_attention_cuda.py (the CUDA
# split against float32 and the Triton split at every published shape, those two included),
# test_kernels.py and test_gpu_engine.py but its embedded-model tests (the GGUF is not carried;
# the change does not reach its shape, 3 kv heads of head size 64).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run5_gpu.txt"
export PYTHONUNBUFFERED=1
timeout 540 python3 -m pytest -q -p no:cacheprovider -rs test/engine/test_attention_cuda.py \
  test/engine/test_kernels.py test/engine/test_gpu_engine.py -k "not embedded" 2>&1 \
  | grep -v -i warn | tee "$OUT/run5_tests.log" | tail -8
