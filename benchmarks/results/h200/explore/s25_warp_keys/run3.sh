#!/usr/bin/env bash
# Session 25, run 3: Qwen2.5-1.5B's attention row at 8 warps (config/kernels.yaml) against
# HEAD's package (.carry/pkg_base/) in one process (s21_start/inproc.py, 10 pairs a cell), ctx
# 2048 and 16384; the kernel tests natively.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run3_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 100 python3 -m pytest -q -p no:cacheprovider test/engine/test_kernels.py \
  > "$OUT/run3_kernel_tests.log" 2>&1
tail -n 1 "$OUT/run3_kernel_tests.log"
timeout 300 python3 benchmarks/results/h200/explore/s21_start/inproc.py "$PWD/.carry/pkg_base" \
  2048,16384 qwen2.5-1.5b > "$OUT/run3_inproc_qwen.log" 2>&1
grep -v -i warn "$OUT/run3_inproc_qwen.log"
