#!/usr/bin/env bash
# Session 25, run 4 (after two `carry` calls with the embedded GGUF's parts 0-3; this call
# carries part 4 and .whl/): the GPU tests at the package as submitted (76a0666's package: this
# session's commits change docs and explore scripts only), session 24's suite, 420 s.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run4_gpu.txt"
TESTS_LIMIT=420 EXTRA_TESTS="test/engine/test_q4_cuda.py test/engine/test_q4.py test/engine/test_sampling.py test/engine/test_faults.py test/engine/test_generate_loop.py test/bench/test_bench_cli.py test/bench/test_bench_attention.py test/engine/test_stacks_gpu.py test/engine/test_stacks.py" \
  OUT=$OUT benchmarks/run_device.sh tests | grep -v -i warn | tail -n 30
