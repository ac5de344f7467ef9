#!/usr/bin/env bash
# ring_probe.cu variants against the per-op kernels, 1B and 8B shapes. RING_VARIANTS holds
# slots:bytes[:nomath|:step]: ring slots and their size; nomath, consumers that only wait for
# each slot and free it (what the bulk copies and grid barriers alone allow); step, a warp
# reduction after every 512-byte step (runs 1 and 12) instead of one per group of steps.
# Run 1: "11:16384:step 6:16384:step 3:16384:step"; run 12: "11:16384:step
# 11:16384:nomath 6:32768:step"; run 13: the default.
set -u
here=benchmarks/results/h200/explore/s12_ring
build=$(mktemp -d)
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
libs=()
for variant in ${RING_VARIANTS:-11:16384 6:32768 11:16384:nomath}; do
  IFS=: read -r slots bytes kind <<< "$variant"
  flags=()
  [ "${kind:-}" = nomath ] && flags+=(-DNO_MATH)
  [ "${kind:-}" = step ] && flags+=(-DSTEP_REDUCE)
  name=ring_${slots}x${bytes}${kind:+_$kind}
  $nvcc -O3 -std=c++17 -shared -Xcompiler -fPIC -arch=sm_90a -DSLOTS=$slots -DSLOT_BYTES=$bytes \
    "${flags[@]}" -o $build/$name.so $here/ring_probe.cu || exit 1
  libs+=($build/$name.so)
done
export PYTHONPATH=$PWD
for arch in llama-3.2-1b llama-3.1-8b; do
  timeout 200 python3 $here/ring_probe.py $arch "${libs[@]}" 2>&1 | tail -16
done
