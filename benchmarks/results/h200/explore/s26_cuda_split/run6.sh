#!/usr/bin/env bash
# Session 26, run 6 (after run 5 stashed the embedded GGUF's parts 0-2; this call carries parts 3
# and 4 and .whl/): the GPU tests at the package as submitted, session 25's suite and
# test_attention_cuda.py.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run6_gpu.txt"
TESTS_LIMIT=540 EXTRA_TESTS="test/engine/test_attention_cuda.py test/engine/test_q4_cuda.py test/engine/test_q4.py test/engine/test_sampling.py test/engine/test_faults.py test/engine/test_generate_loop.py test/bench/test_bench_cli.py test/bench/test_bench_attention.py test/engine/test_stacks_gpu.py test/engine/test_stacks.py" \
  OUT=$OUT benchmarks/run_device.sh tests | grep -v -i warn | tail -n 30
