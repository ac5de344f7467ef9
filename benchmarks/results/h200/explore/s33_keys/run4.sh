#!/usr/bin/env bash
# Session 33, run 4 (prepared; see run1.sh): the same per-kernel table as run 2 for the 4-bit 8B
# at ctx 2048 and 16384 (two cells a call: each takes up to 320 s of the stage's timeouts).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run4_gpu.txt"
PROFILE_MODELS=synthetic:llama-3.1-8b:gptq \
  PROFILE_CONTEXTS="2048 16384" OUT=$OUT benchmarks/run_device.sh env profile
tar czf "$OUT/run4.tgz" -C "$OUT/work" . && rm -rf "$OUT/work"
