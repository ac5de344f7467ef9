#!/usr/bin/env bash
# Session 22, run 1: the in-step sweep (session 14's timeline.py, interleaved rounds) of
# tiles_ahead, the weight tiles a GEMV program loads before its PDL wait, for the bf16 GEMVs
# whose programs are all resident at once (o_proj, down) and QKV, at each shape's launch shape.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader > "$OUT/gpu.txt"
cd benchmarks/results/h200/explore/s14_timeline
sweep() {   # arch, seconds, contexts, arms (';'-separated, the first empty: kernels.yaml's)
  ROUNDS=3 ARMS="$4" timeout "$2" python3 timeline.py "$1" $3 > "$OUT/run1_sweep_$1.log" 2>&1
  cut -c1-150 "$OUT/run1_sweep_$1.log" | grep -v -i warn
}
o8=matvec_add:4096:4096=16,512,1,8
d8=matvec_add:4096:14336=16,512,1,8
q8=rms_matvec:6144:4096=8,256,1,4
sweep llama-3.1-8b 230 "2048 16384" \
  ";$o8,2;$o8,3;$d8,2;$d8,3;$q8,2;$o8,2 $d8,2;$o8,3 $d8,3"
o1=matvec_add:2048:2048=8,1024,1,8
d1=matvec_add:2048:8192=4,1024,1,8
q1=rms_matvec:3072:2048=8,1024,1,4
sweep llama-3.2-1b 100 2048 ";$o1,2;$d1,2;$d1,3;$q1,2;$o1,2 $d1,3"
o3=matvec_add:3072:3072=8,1024,1,4
d3=matvec_add:3072:8192=8,1024,1,4
sweep llama-3.2-3b 100 2048 ";$o3,2;$d3,2;$d3,3;$o3,2 $d3,3"
dq=matvec_add:1536:8960=8,1024,2,4
sweep qwen2.5-1.5b 80 2048 ";$dq,2;$dq,3"
