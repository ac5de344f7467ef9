#!/usr/bin/env bash
# persistent_step.cu against the per-op layers (graphed) on a few layers of four shapes.
set -u
export PYTHONPATH=$PWD
for arch in llama-3.2-1b qwen2.5-1.5b llama-3.2-3b llama-3.1-8b; do
  timeout 120 python3 benchmarks/results/h200/explore/s11_persistent/persistent_probe.py $arch ${PROBE_LAYERS:-4} ${PROBE_CTX:-2048} 2>&1 | tail -3
done
