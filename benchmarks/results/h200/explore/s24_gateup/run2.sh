#!/usr/bin/env bash
# Session 24, run 2: probe.py with the arms of several blocks a program (run1.sh as run2), then
# v28 (llama.fuse_gate_up's blocked layout read by the package's gate/up kernel) against HEAD's
# package (b710f1c, its physinf_ros/ and config/ in .carry/pkg_base/) taking turns in one
# process (s21_start/inproc.py, 10 pairs a cell): the 8B at ctx 2048 and 16384, where run 1's
# gain is.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bash "$here/run1.sh" run2 | grep -v "bit for bit: True"
cd "$here/../../../../.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 120 python3 -m pytest -q -p no:cacheprovider test/engine/test_kernels.py -k gate_up \
  > "$OUT/run2_kernel_tests.log" 2>&1
tail -n 1 "$OUT/run2_kernel_tests.log"
base=$PWD/.carry/pkg_base
inproc=benchmarks/results/h200/explore/s21_start/inproc.py
timeout 230 python3 $inproc "$base" 2048,16384 llama-3.1-8b > "$OUT/run2_inproc_8b.log" 2>&1
grep -v -i warn "$OUT/run2_inproc_8b.log" | grep -v "by step"
