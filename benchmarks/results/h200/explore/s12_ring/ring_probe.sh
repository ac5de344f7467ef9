#!/usr/bin/env bash
# ring_probe.cu at three ring depths against the per-op kernels, for the 1B and 8B shapes.
set -u
here=benchmarks/results/h200/explore/s12_ring
build=$(mktemp -d)
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
for slots in 11 6 3; do
  $nvcc -O3 -std=c++17 -shared -Xcompiler -fPIC -arch=sm_90a -DSLOTS=$slots \
    -o $build/ring_$slots.so $here/ring_probe.cu || exit 1
done
export PYTHONPATH=$PWD
for arch in llama-3.2-1b llama-3.1-8b; do
  timeout 200 python3 $here/ring_probe.py $arch $build/ring_11.so $build/ring_6.so $build/ring_3.so 2>&1 | tail -14
done
