#!/usr/bin/env bash
# Run 6: the scalar attention (attention_v16a_scalar.cu, 16 splits, 3 stages) against the keys'
# length, then Nsight Compute on it at 16384 keys. The probe of that run called the library's
# entry point with ctypes (the committed attn_probe.py drives today's attention.cu instead).
set -u
build=$(mktemp -d)
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
$nvcc -O3 -std=c++17 -shared -Xcompiler -fPIC -arch=sm_90 -lineinfo \
  -o $build/attention_16_3.so benchmarks/results/h200/explore/s12_attention/attention_v16a_scalar.cu
echo "library: $build/attention_16_3.so (profiled with ncu --section SpeedOfLight"\
  "--section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats"\
  "--section LaunchStats --section Occupancy -k regex:attention_kernel -c 1)"
