#!/usr/bin/env bash
# Session 34, run 3 (prepared; see run1.sh): the per-kernel tables of the Llama-3.2-3B shape and
# the bf16 Llama-3.1-8B at ctx 2048 (each cell takes at most 320 s of the stage's timeouts).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run3_gpu.txt"
PROFILE_MODELS="synthetic:llama-3.2-3b synthetic:llama-3.1-8b" PROFILE_CONTEXTS=2048 \
  OUT=$OUT benchmarks/run_device.sh profile
mv "$OUT/results.tgz" "$OUT/run3.tgz" && rm -rf "$OUT/work"
