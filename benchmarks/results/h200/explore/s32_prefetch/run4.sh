#!/usr/bin/env bash
# Session 32, run 4: the probes as committed after runs 1-3 (their arms' check and rounds now
# relaxed_probe.check_and_time): prefetch_probe.py with WINDOWS=1 and carveout_probe.py on the 1B
# at ctx 2048, a repeat of runs 2 and 3's 1B rows on another machine.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run4_gpu.txt"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
probes=benchmarks/results/h200/explore/s32_prefetch
WINDOWS=1 timeout 250 python3 $probes/prefetch_probe.py llama-3.2-1b:2048 2>&1 \
  | grep -v -i warn | tee "$OUT/run4.log"
timeout 250 python3 $probes/carveout_probe.py llama-3.2-1b:2048 2>&1 | grep -v -i warn \
  | tee -a "$OUT/run4.log"
