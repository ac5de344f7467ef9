#!/usr/bin/env bash
# Session 17, runs 2 and 3: attention variants of kernels.py interleaved in the probe (layers
# and head graphed, each arm checked against ops_torch), this tree's as arm NAME, the others
# carried files: probe.sh LOG NAME OTHER=PATH... Run 2: probe.sh run2_probe.log new
# v5=.carry/alt/kernels_v5.py base=.carry/base/physinf_ros/engine/kernels.py; run 3: probe.sh
# run3_probe.log v6 v2=.carry/alt/kernels_v2.py base=.carry/base/physinf_ros/engine/kernels.py
set -uo pipefail
log=$1 name=$2; shift 2
cd "$(dirname "$0")/../../../../.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
others=""; for arm in "$@"; do others="$others${others:+;}${arm%%=*}=$PWD/${arm#*=}"; done
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader > "$OUT/gpu.txt"
KERNELS=$others ARMS=$name timeout 300 python3 benchmarks/results/h200/explore/s14_attention/probe.py \
  16384 llama-3.1-8b llama-3.2-1b qwen2.5-1.5b llama-3.2-3b > "$OUT/$log" 2>&1
grep -E '^[a-z]|ctx' "$OUT/$log"
