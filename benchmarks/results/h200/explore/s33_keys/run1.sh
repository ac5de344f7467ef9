#!/usr/bin/env bash
# Session 33, run 1 (prepared in session 33, which was lent no device; for the next session that
# is): session 32's run 7 and its prepared run 11 at the protocol's grid. Every session-32 probe
# attended over exactly 2048 keys, one 64-key tile in each of 32 splits; the protocol's steps
# attend over 2049-2078 keys, 17 splits of two tiles. carveout_probe.py with REDUCE_SWEEP=1 (the
# reduce's carveout alone at 0, 25, 50, 75) on the 3B at 2048 and 2064 keys in one process and
# the 8B at 2064; then with V38=1 (run 7's arm beside v38_kernels.diff's kernels.py at
# reduce_carveout 0 and -1) on the 3B at 2048 and 2064.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run1_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
probe=benchmarks/results/h200/explore/s32_prefetch/carveout_probe.py
REDUCE_SWEEP=1 timeout 330 python3 $probe llama-3.2-3b:2048,2064 llama-3.1-8b:2064 2>&1 \
  | grep -v -i warn | tee "$OUT/run1_sweep.log"
V38=1 timeout 200 python3 $probe llama-3.2-3b:2048,2064 2>&1 | grep -v -i warn \
  | tee "$OUT/run1_v38.log"
