#!/usr/bin/env bash
# Session 24, run 3 (after two `carry` calls with the embedded GGUF's parts 0-3; this call
# carries part 4 and .whl/): at the package as submitted, the GPU tests (the suite of session
# 23's run 5, with 420 s for the stage).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run3_gpu.txt"
TESTS_LIMIT=420 EXTRA_TESTS="test/engine/test_q4_cuda.py test/engine/test_q4.py test/engine/test_sampling.py test/engine/test_faults.py test/engine/test_generate_loop.py test/bench/test_bench_cli.py test/bench/test_bench_attention.py test/engine/test_stacks_gpu.py test/engine/test_stacks.py" \
  OUT=$OUT benchmarks/run_device.sh tests | grep -v -i warn | tail -n 30
