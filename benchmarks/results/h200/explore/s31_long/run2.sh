#!/usr/bin/env bash
# Session 31, run 2: the CUDA split kernel with a ring of 3 key tiles a warp (the tree, whose
# kernels.yaml rows take attention num_stages 3) against 2 (the package before: flag
# attention.num_stages=2) and against the Triton split, after test_attention_cuda.py. The
# protocol's sessions taking turns in one process (s21_start/inproc.py, flags: base, 10 pairs).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run2_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q -p no:cacheprovider -x test/engine/test_attention_cuda.py 2>&1 \
  | grep -v -i warn | tee "$OUT/run2_tests.log" | tail -n 3
ab() {
  timeout "$1" python3 benchmarks/results/h200/explore/s21_start/inproc.py "flags:$2" "$3" "${@:4}" \
    2>&1 | grep -v -i warn | tee -a "$OUT/run2_inproc.log"
}
echo "== 3 stages (new) against 2 (base)" | tee -a "$OUT/run2_inproc.log"
ab 150 attention.num_stages=2 2048,16384 llama-3.1-8b:gptq
ab 150 attention.num_stages=2 2048,16384 llama-3.1-8b
ab 100 attention.num_stages=2 2048 llama-3.2-1b llama-3.2-3b
echo "== 3 stages (new) against the Triton split (base)" | tee -a "$OUT/run2_inproc.log"
ab 100 attention.cuda=0 16384 llama-3.1-8b:gptq
