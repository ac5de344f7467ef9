#!/usr/bin/env bash
# Session 36, run 2 (carries .gguf2/smol.gguf.part1 and .whl/, on run 1's machine): the GPU tests
# outside s34_close's two sets that load the embedded model: sampling, faults (OOM fallback),
# physinf-bench's CLI, exllamav2 (skipped where it is not installed).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run2_tests.log"
cp .gguf2/smol.gguf.part1 "$HOME/physinf_stash/"
OUT=$OUT benchmarks/run_device.sh carry > /dev/null 2>&1   # puts the GGUF together
PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 timeout 420 python3 -m pytest -q \
  -p no:cacheprovider -rs test/engine/test_sampling.py test/engine/test_faults.py \
  test/bench/test_bench_cli.py test/engine/test_exllamav2.py 2>&1 \
  | grep -v -i -E "^ *warn|warning:|warnings.warn" | tee -a "$OUT/run2_tests.log" | tail -n 12
rm -rf "$OUT/work"
