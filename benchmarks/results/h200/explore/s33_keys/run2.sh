#!/usr/bin/env bash
# Session 33, run 2 (prepared; see run1.sh): the per-kernel table of the package as it stands, the
# robot shapes at ctx 2048: the `profile` stage (profile_step.py's wall time, kernels and gaps,
# then each kernel alone under Nsight Compute, tabled per layer op by kernel_table.py, which now
# places attention_split.cu's split kernel as it places the Triton one).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run2_gpu.txt"
PROFILE_MODELS="synthetic:llama-3.2-1b synthetic:qwen2.5-1.5b synthetic:llama-3.2-3b" \
  PROFILE_CONTEXTS=2048 OUT=$OUT benchmarks/run_device.sh env profile
tar czf "$OUT/run2.tgz" -C "$OUT/work" . && rm -rf "$OUT/work"
