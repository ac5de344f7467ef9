#!/usr/bin/env bash
# Session 36, run 1: session 14's timeline.py (capped stamps) on the three robot shapes at the
# protocol's lengths. Every in-step table of the robot shapes on record attends over exactly
# 2048 keys, where s33_keys/run1.sh found the 3B's step 52 us slower than at 2064 (the reduce's
# carveout); the protocol's steps attend over 2049-2078. The 3B at 2048 and 2064 in one process,
# Qwen2.5-1.5B and the 1B at 2064.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run1_gpu.txt"
cd benchmarks/results/h200/explore/s14_timeline
for cell in "llama-3.2-3b 2048 2064" "qwen2.5-1.5b 2064" "llama-3.2-1b 2064"; do
  set -- $cell
  timeout 150 python3 timeline.py "$@" 2>&1 | grep -v -i warn > "$OUT/run1_timeline_$1.log"
  grep -E "plain|stamped|launches|^qkv|^attn|^o_proj|^gate|^down|^head" \
    "$OUT/run1_timeline_$1.log"
done
