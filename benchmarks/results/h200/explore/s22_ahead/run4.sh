#!/usr/bin/env bash
# Session 22, run 4 (after `carry` calls with the embedded GGUF's first parts): at the package as
# submitted, the GPU tests, the protocol stage (README's measured table), the robot shapes, then
# the per-op windows of one step of each shape (session 14's timeline.py, default mode).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader > "$OUT/gpu.txt"
TESTS_LIMIT=330 EXTRA_TESTS="test/engine/test_q4_cuda.py test/engine/test_q4.py test/engine/test_sampling.py test/engine/test_faults.py test/engine/test_generate_loop.py test/bench/test_bench_cli.py test/bench/test_bench_attention.py test/engine/test_stacks_gpu.py test/engine/test_stacks.py" \
  BENCH_LIMIT=120 ROBOT_MODES=graphed OUT=$OUT benchmarks/run_device.sh tests protocol robots \
  | grep -v -i warn | tail -n 40
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
cd benchmarks/results/h200/explore/s14_timeline
for arch in llama-3.2-1b qwen2.5-1.5b llama-3.2-3b llama-3.1-8b; do
  timeout 40 python3 timeline.py $arch 2048 > "$OUT/run4_timeline_$arch.log" 2>&1
  grep -A 8 "^op |" "$OUT/run4_timeline_$arch.log" | cut -c1-100
done
