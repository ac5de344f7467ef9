#!/usr/bin/env bash
# Session 27, run 18: after the review's two changes, the package's (cuda_library's one
# `unavailable` for both CUDA sources) and the scripts' (cuda_timeline.py's timing loop from
# split_cuda_probe.time_arms, the fused tables' op names an argument): the GPU tests that reach
# either CUDA source at the package as submitted, then cuda_timeline.py on the 1B with the package's
# split and v30h (a five-op stamped table).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run18_gpu.txt"
export PYTHONUNBUFFERED=1
timeout 300 python3 -m pytest -q -p no:cacheprovider -rs test/engine/test_attention_cuda.py \
  test/engine/test_kernels.py test/engine/test_q4_cuda.py test/engine/test_cuda_library.py \
  "test/engine/test_gpu_engine.py::test_the_cuda_attention_split_matches_transformers" 2>&1 \
  | grep -v -i warn | tee "$OUT/run18_tests.log" | tail -6
merge="$here/split_merge.cu:min_chunk=64,fused=1,-DWIDE_MERGE,-DLATE_TRIGGER"
PYTHONPATH=$PWD SOURCES="v30e=$here/split_cuda.cu:min_chunk=64 v30h=$merge" \
  timeout 150 python3 "$here/cuda_timeline.py" llama-3.2-1b:2060 2>&1 | grep -v -i warn \
  | tee "$OUT/run18.log" | grep -E "ctx 2060|^attn|^o_proj"
