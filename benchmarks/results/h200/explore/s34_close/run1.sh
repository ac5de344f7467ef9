#!/usr/bin/env bash
# Session 34, run 1 (prepared in session 34, which was lent no device, for the next session
# that is; carries .gguf2/smol.gguf.part0, the embedded GGUF's first half, stashed for run 2 on
# the same machine): issue 14's closing runs at the package as submitted. The GPU tests that do
# not load the embedded model (session 31 run 14's set), then the profile stage's per-kernel
# table of the Llama-3.2-1B shape at ctx 2048 (the "after" beside profile_s6/before_*).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run1_tests.log"
git log -1 --format='commit %H' >> "$OUT/run1_tests.log" 2>/dev/null
mkdir -p "$HOME/physinf_stash" && cp .gguf2/smol.gguf.part0 "$HOME/physinf_stash/"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q -p no:cacheprovider -rs \
  test/engine/test_kernels.py test/engine/test_gpu_engine.py test/engine/test_reply_row.py \
  test/engine/test_attention_cuda.py \
  -k "not embedded and not graphed_and_eager and not overlapped_loop and not each_graphed_step" \
  2>&1 | grep -v -i warn | tee -a "$OUT/run1_tests.log" | tail -n 6
PROFILE_MODELS=synthetic:llama-3.2-1b PROFILE_CONTEXTS=2048 OUT=$OUT \
  benchmarks/run_device.sh env profile
mv "$OUT/results.tgz" "$OUT/run1.tgz" && rm -rf "$OUT/work"
