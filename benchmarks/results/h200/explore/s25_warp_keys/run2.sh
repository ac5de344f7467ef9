#!/usr/bin/env bash
# Session 25, run 2: attention launch shapes not swept before, in the step (session 14's
# timeline.py with ARMS, 5 rounds, arms interleaved): 64-key tiles at 8 warps, 32-key tiles at
# 2, 4 and 8 warps, and session 16's 128-key tiles at 8 warps for reference; the 8B at ctx
# 2048 and 16384, the robot shapes at 2048.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run2_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
arms="; attention.num_warps=8; attention.block_t=32; attention.num_warps=2 attention.block_t=32"
arms="$arms; attention.num_warps=8 attention.block_t=32"
arms="$arms; attention.num_warps=8 attention.block_t=128"
cd benchmarks/results/h200/explore/s14_timeline
ROUNDS=5 ARMS="$arms" timeout 220 python3 timeline.py llama-3.1-8b 2048 16384 \
  > "$OUT/run2_sweep_llama-3.1-8b.log" 2>&1
grep "step" "$OUT/run2_sweep_llama-3.1-8b.log" | sed 's/; op totals.*//'
for arch in llama-3.2-1b qwen2.5-1.5b llama-3.2-3b; do
  ROUNDS=5 ARMS="$arms" timeout 95 python3 timeline.py $arch 2048 \
    > "$OUT/run2_sweep_$arch.log" 2>&1
  grep "step" "$OUT/run2_sweep_$arch.log" | sed 's/; op totals.*//'
done
