#!/usr/bin/env bash
# Session 17, run 1: this tree's attention against the base's (.carry/base), in the step.
# The probe (layers and head graphed, arms interleaved, each checked against ops_torch), then
# the stamped timeline of both at ctx 2048 (8B and 1B) and 16384 (8B). Logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../../../../.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
BASE=$PWD/.carry/base/physinf_ros/engine/kernels.py
here=benchmarks/results/h200/explore
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader > "$OUT/gpu.txt"
BASE_KERNELS=$BASE ARMS=new timeout 240 python3 $here/s14_attention/probe.py 16384 \
  llama-3.1-8b llama-3.2-1b qwen2.5-1.5b llama-3.2-3b > "$OUT/run1_probe.log" 2>&1
cd $here/s14_timeline
for arm in new base; do
  src=""; [ $arm = base ] && src=$BASE
  KERNELS_SOURCE=$src timeout 100 python3 timeline.py llama-3.1-8b 2048 16384 \
    > "$OUT/run1_timeline_8b_$arm.log" 2>&1
  KERNELS_SOURCE=$src timeout 60 python3 timeline.py llama-3.2-1b 2048 \
    > "$OUT/run1_timeline_1b_$arm.log" 2>&1
done
tail -n 3 "$OUT"/*.log
