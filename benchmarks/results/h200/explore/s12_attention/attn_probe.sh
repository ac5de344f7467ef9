#!/usr/bin/env bash
# attention.cu alone at 8 and 16 splits per kv head against the Triton kernels.
PYTHONPATH=$PWD timeout 200 python3 benchmarks/results/h200/explore/s12_attention/attn_probe.py
