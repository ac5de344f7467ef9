#!/usr/bin/env bash
# Session 24, run 8: at the final commit (prefill's SiLU product taken on the blocks' views, so
# neither half of gate/up's output is copied out first): the kernel tests and the engine's GPU
# tests against transformers (without the embedded model, whose GGUF this call does not carry)
# and the 4-bit ones, then the protocol paired against 7012db1's llama.py and ops_torch.py
# (.carry/base/), one round, for the prefill time each cell records.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run8_gpu.txt"
timeout 200 python3 -m pytest -q -p no:cacheprovider -rs test/engine/test_kernels.py \
  test/engine/test_gpu_engine.py test/engine/test_q4.py -k "not embedded" \
  > "$OUT/run8_gpu_tests.log" 2>&1
tail -n 3 "$OUT/run8_gpu_tests.log"
PAIRED_MODELS="synthetic:llama-3.1-8b" PAIRED_CONTEXTS=2048,16384 PAIRED_ROUNDS=1 OUT=$OUT \
  benchmarks/run_device.sh paired | grep -v -i warn | tail -n 8
python3 - "$OUT/work/paired" <<'PY'
import json, pathlib, sys
for path in sorted(pathlib.Path(sys.argv[1]).glob('*.json')):
    for c in json.loads(path.read_text())['cells']:
        print(path.stem, c['ctx'], 'prefill ms', [round(x, 1) for x in c['prefill_ms']],
              'step ms', round(c['step_ms_p50'], 3))
PY
