#!/usr/bin/env bash
# Session 23, run 5 (after `carry` calls with the embedded GGUF's first parts): at the package as
# submitted, the GPU tests and the protocol stage (README's measured table).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader > "$OUT/gpu.txt"
TESTS_LIMIT=330 EXTRA_TESTS="test/engine/test_q4_cuda.py test/engine/test_q4.py test/engine/test_sampling.py test/engine/test_faults.py test/engine/test_generate_loop.py test/bench/test_bench_cli.py test/bench/test_bench_attention.py test/engine/test_stacks_gpu.py test/engine/test_stacks.py" \
  BENCH_LIMIT=200 OUT=$OUT benchmarks/run_device.sh tests protocol | grep -v -i warn | tail -n 30
