#!/usr/bin/env bash
# Session 23, run 1: v26 (the step timed by its own kernels, no event in its graph). The GPU
# kernel tests first (the new clock test among them), then the protocol's sessions, the tree's
# decoder against HEAD's package (8806e11, its physinf_ros/ and config/ in .carry/pkg_base/)
# taking turns in one process (s21_start/inproc.py, 10 pairs a cell): the robot shapes at ctx
# 2048, the 8B at 2048 and 16384. Its files are named after the run given as $1 (run 3 runs
# this script again at v26 + v27: run3.sh).
set -uo pipefail
run=${1:-run1}
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader > "$OUT/gpu.txt"
timeout 120 python3 -m pytest -q -p no:cacheprovider test/engine/test_kernels.py \
  > "$OUT/${run}_kernel_tests.log" 2>&1
tail -n 3 "$OUT/${run}_kernel_tests.log"
base=$PWD/.carry/pkg_base
inproc=benchmarks/results/h200/explore/s21_start/inproc.py
timeout 220 python3 $inproc "$base" 2048 llama-3.2-1b qwen2.5-1.5b llama-3.2-3b \
  > "$OUT/${run}_inproc_robots.log" 2>&1
grep -v -i warn "$OUT/${run}_inproc_robots.log" | grep -v "by step"
timeout 240 python3 $inproc "$base" 2048,16384 llama-3.1-8b > "$OUT/${run}_inproc_8b.log" 2>&1
grep -v -i warn "$OUT/${run}_inproc_8b.log" | grep -v "by step"
