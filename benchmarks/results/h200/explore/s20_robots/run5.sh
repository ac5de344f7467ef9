#!/usr/bin/env bash
# Session 20, run 5 (after run 4's carry of the first two GGUF parts; the 1B's QKV row back to
# HEAD's after run 4's protocol): the GPU tests at the package as submitted, then the robot-size
# shapes with the protocol (robots_*.json).
set -uo pipefail
cd "$(dirname "$0")/../../../../.."
TESTS_LIMIT=450 EXTRA_TESTS="test/engine/test_q4_cuda.py test/engine/test_q4.py test/engine/test_sampling.py test/engine/test_faults.py test/engine/test_generate_loop.py test/bench/test_bench_cli.py test/bench/test_bench_attention.py test/engine/test_stacks_gpu.py test/engine/test_stacks.py" benchmarks/run_device.sh carry tests
cp "$OUT/work/tests.log" "$OUT/gpu_tests.log"
ROBOT_MODES=graphed benchmarks/run_device.sh robots
