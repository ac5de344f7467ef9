#!/usr/bin/env bash
# Session 26, run 10: run 6's one failed GPU test, rewritten (test_gpu_engine.py's
# test_the_cuda_attention_split_matches_transformers: the CUDA and the Triton split on the same
# tiny checkpoint, per step); the other GPU tests of the CUDA split passed in runs 5 and 6 at the
# same package.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run10_gpu.txt"
export PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q -p no:cacheprovider -rs -s \
  "test/engine/test_gpu_engine.py::test_the_cuda_attention_split_matches_transformers" 2>&1 | grep -v -i warn | tee "$OUT/run10_tests.log" \
  | grep -E "split: logit|passed|failed|Error|assert" | head -20
