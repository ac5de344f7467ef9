#!/usr/bin/env bash
# Session 25, run 1: v29 (a warp for each group of keys in the split kernel) natively against
# the kernel tests; then against HEAD's package (76a0666, its physinf_ros/ and config/ in
# .carry/pkg_base/) taking turns in one process (s21_start/inproc.py, 10 pairs a cell) on the
# 8B at ctx 2048 and 16384; the per-op windows of one stamped step of the 8B at 2048, v29's
# and HEAD's (session 14's timeline.py, KERNELS_SOURCE); the robot shapes in the time left.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run1_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 120 python3 -m pytest -q -p no:cacheprovider test/engine/test_kernels.py \
  > "$OUT/run1_kernel_tests.log" 2>&1
tail -n 1 "$OUT/run1_kernel_tests.log"
base=$PWD/.carry/pkg_base
inproc=benchmarks/results/h200/explore/s21_start/inproc.py
timeout 230 python3 $inproc "$base" 2048,16384 llama-3.1-8b > "$OUT/run1_inproc_8b.log" 2>&1
grep -v -i warn "$OUT/run1_inproc_8b.log" | grep -v "by step"
timeline=benchmarks/results/h200/explore/s14_timeline/timeline.py
timeout 70 python3 $timeline llama-3.1-8b 2048 > "$OUT/run1_timeline_8b.log" 2>&1
KERNELS_SOURCE=$base/physinf_ros/engine/kernels.py timeout 70 python3 $timeline llama-3.1-8b \
  2048 > "$OUT/run1_timeline_8b_base.log" 2>&1
tail -n 25 "$OUT/run1_timeline_8b.log" "$OUT/run1_timeline_8b_base.log"
left=$((560 - SECONDS))
timeout $left python3 $inproc "$base" 2048 llama-3.2-1b qwen2.5-1.5b llama-3.2-3b \
  > "$OUT/run1_inproc_robots.log" 2>&1
grep -v -i warn "$OUT/run1_inproc_robots.log" | grep -v "by step"
