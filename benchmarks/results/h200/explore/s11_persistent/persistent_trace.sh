#!/usr/bin/env bash
set -u
export PYTHONPATH=$PWD
for arch in llama-3.1-8b llama-3.2-1b; do
  timeout 120 python3 benchmarks/results/h200/explore/s11_persistent/persistent_trace.py $arch 4 2048 2>&1 | tail -22
done
