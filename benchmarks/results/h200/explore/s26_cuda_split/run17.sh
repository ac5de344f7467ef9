#!/usr/bin/env bash
# Session 27, run 17: the GPU tests that reach attention_cuda.supported, after it began to check
# the sin table as it checks cos (the CUDA split against float32, the Triton split and
# transformers; the kernels' rope_attention), at the package as submitted.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run17_gpu.txt"
export PYTHONUNBUFFERED=1
timeout 480 python3 -m pytest -q -p no:cacheprovider -rs test/engine/test_attention_cuda.py \
  test/engine/test_kernels.py \
  "test/engine/test_gpu_engine.py::test_the_cuda_attention_split_matches_transformers" 2>&1 \
  | grep -v -i warn | tee "$OUT/run17_tests.log" | tail -15
