#!/usr/bin/env bash
# Session 32, run 8 (carries .gguf2/smol.gguf.part0, the embedded GGUF's first half of two,
# stashed for run 9 on the same machine): at the package as submitted (v38, the attention reduce
# at carveout 0): the protocol on the robot shapes (robots_*.json, in results.tgz); the GPU
# tests that do not load the embedded model; the protocol's sessions of the package's decoder
# against the same decoder with attention.reduce_carveout=-1 on the 3B in one process.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run8_gpu.txt"
mkdir -p "$HOME/physinf_stash" && cp .gguf2/smol.gguf.part0 "$HOME/physinf_stash/"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
BENCH_LIMIT=110 ROBOT_MODES=graphed OUT=$OUT benchmarks/run_device.sh robots \
  | grep -v -i warn | tail -n 24
cat "$OUT/run8_gpu.txt" > "$OUT/run8_tests.log"
timeout 200 python3 -m pytest -q -p no:cacheprovider -rs \
  test/engine/test_kernels.py test/engine/test_gpu_engine.py test/engine/test_reply_row.py \
  test/engine/test_attention_cuda.py \
  -k "not embedded and not graphed_and_eager and not overlapped_loop and not each_graphed_step" \
  2>&1 | grep -v -i warn | tee -a "$OUT/run8_tests.log" | tail -n 6
timeout 110 python3 benchmarks/results/h200/explore/s21_start/inproc.py \
  flags:attention.reduce_carveout=-1 2048 llama-3.2-3b 2>&1 | grep -v -i warn \
  | tee "$OUT/run8_inproc.log"
