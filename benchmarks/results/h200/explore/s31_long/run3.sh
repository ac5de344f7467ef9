#!/usr/bin/env bash
# Session 31, run 3: the CUDA split kernel's ring at 4 key tiles a warp (NEW_FLAGS) against 3 on
# the shapes whose blocks still fit at 4 (the 1B, head size 64; Qwen2.5-1.5B, 34 blocks with keys
# at 2049 keys), and Qwen2.5-1.5B at 3 against 2 (not in run 2). The protocol's sessions taking
# turns in one process (s21_start/inproc.py, flags: base, 10 pairs a cell), ctx 2048.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run3_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
ab() {
  timeout "$1" python3 benchmarks/results/h200/explore/s21_start/inproc.py "flags:$2" "$3" "${@:4}" \
    2>&1 | grep -v -i warn | tee -a "$OUT/run3_inproc.log"
}
echo "== 4 stages (new) against 3 (base)" | tee -a "$OUT/run3_inproc.log"
NEW_FLAGS=attention.num_stages=4 ab 150 attention.num_stages=3 2048 llama-3.2-1b qwen2.5-1.5b
echo "== 3 stages (new) against 2 (base)" | tee -a "$OUT/run3_inproc.log"
ab 100 attention.num_stages=2 2048 qwen2.5-1.5b
