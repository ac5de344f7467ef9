#!/usr/bin/env bash
# Session 22, run 2: on the 8B, the in-step sweep of run 1's winners and their combinations (5
# interleaved rounds, ctx 2048 and 16384), then the protocol paired: the tree (QKV and down with
# two tiles ahead in kernels.yaml) against the package before v24 (its kernels.py and
# kernels.yaml in .carry/base/), 4 rounds, each arm first in turn.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader > "$OUT/gpu.txt"
o8=matvec_add:4096:4096=16,512,1,8
d8=matvec_add:4096:14336=16,512,1,8
q8=rms_matvec:6144:4096=8,256,1,4
h8=rms_matvec:128256:4096=8,256,1,4
# Every arm sets all three shapes, so the tree's kernels.yaml does not decide any of them.
arms="$q8,1 $d8,1 $o8,1;$q8,2 $d8,1 $o8,1;$q8,1 $d8,2 $o8,1;$q8,2 $d8,2 $o8,1;$q8,3 $d8,2 $o8,1"
arms="$arms;$q8,2 $d8,2 $o8,2;$q8,2 $d8,2 $o8,1 $h8,2"
(cd benchmarks/results/h200/explore/s14_timeline && ROUNDS=5 ARMS="$arms" timeout 200 \
  python3 timeline.py llama-3.1-8b 2048 16384 > "$OUT/run2_sweep_llama-3.1-8b.log" 2>&1)
grep "^ctx" "$OUT/run2_sweep_llama-3.1-8b.log" | sed 's/op totals, us: //' | cut -c1-200
PAIRED_MODELS=synthetic:llama-3.1-8b PAIRED_CONTEXTS=2048,16384 PAIRED_ROUNDS=4 \
  OUT=$OUT benchmarks/run_device.sh paired | tail -n 12
