#!/usr/bin/env bash
# Session 34, run 4 (prepared; see run1.sh): the per-kernel table of the GPTQ 4-bit Llama-3.1-8B
# at ctx 2048, then the bf16 8B at 16384 (the table's long-context row, after profile_s10/); then
# session 14's stamped step of Qwen2.5-1.5B at 2048 (timeline.py: each op's span in the graphed
# step, the Triton split): the robot shape whose stamped tables on record (sessions 20, 22) are of
# a step the stamps slowed by 12-14%; since session 35 the stamped kernels keep the plain ones'
# registers (docs/PERF.md, session 35).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run4_gpu.txt"
PROFILE_MODELS=synthetic:llama-3.1-8b:gptq PROFILE_CONTEXTS=2048 OUT=$OUT \
  benchmarks/run_device.sh profile
PROFILE_MODELS=synthetic:llama-3.1-8b PROFILE_CONTEXTS=16384 OUT=$OUT \
  benchmarks/run_device.sh profile
mv "$OUT/results.tgz" "$OUT/run4.tgz" && rm -rf "$OUT/work"
cd benchmarks/results/h200/explore/s14_timeline
PYTHONPATH=$here/../../../../.. timeout 120 python3 timeline.py qwen2.5-1.5b 2048 2>&1 \
  | grep -v -i warn > "$OUT/run4_timeline_qwen2.5-1.5b.log"
head -n 14 "$OUT/run4_timeline_qwen2.5-1.5b.log"
