#!/usr/bin/env bash
# Session 36, run 1 (carries .gguf2/smol.gguf.part0, stashed for run 2 on the same machine): the
# GPU tests outside s34_close's two sets that do not load the embedded model, at the package as
# submitted: the CUDA 4-bit GEMVs against the Triton kernel, the 4-bit engine, physinf-attention,
# the stack tests (skipped where a stack is not installed), the generate loop.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run1_tests.log"
mkdir -p "$HOME/physinf_stash" && cp .gguf2/smol.gguf.part0 "$HOME/physinf_stash/"
PYTHONPATH=$PWD PYTHONUNBUFFERED=1 timeout 300 python3 -m pytest -q -p no:cacheprovider -rs \
  test/engine/test_q4_cuda.py test/engine/test_q4.py test/bench/test_bench_attention.py \
  test/engine/test_stacks_gpu.py test/engine/test_generate_loop.py 2>&1 \
  | grep -v -i warn | tee -a "$OUT/run1_tests.log" | tail -n 12
