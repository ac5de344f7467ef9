#!/usr/bin/env bash
# Session 35, run 1 (prepared in session 35, which was lent no device, for a later session with
# time left after s34_close/ and s33_keys/run1.sh): the GEMVs that still fit in one wave with a
# weight tile or two more before their PDL wait and that session 22's run 1 did not try
# (s35_static/ahead_regs.log): the 3B's and Qwen2.5-1.5B's QKV at 2 and 3 tiles ahead, the 1B's
# o_proj at 3. Session 14's timeline.py in-step sweep: unstamped steps, the arms interleaved over
# 5 rounds, and each arm's stamped per-op table (capped at the plain kernels' registers).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$OUT/run1_gpu.txt"
cd benchmarks/results/h200/explore/s14_timeline
sweep() {   # arch, seconds, arms (';'-separated, the first empty: kernels.yaml's)
  ROUNDS=5 ARMS="$3" timeout "$2" python3 timeline.py "$1" 2048 2>&1 | grep -v -i warn \
    > "$OUT/run1_sweep_$1.log"
  cut -c1-150 "$OUT/run1_sweep_$1.log"
}
q3=rms_matvec:5120:3072=8,256,1,4
sweep llama-3.2-3b 150 ";$q3,2;$q3,3"
qq=rms_matvec:2048:1536=4,512,1,4
sweep qwen2.5-1.5b 150 ";$qq,2;$qq,3"
o1=matvec_add:2048:2048=8,1024,1,8
sweep llama-3.2-1b 100 ";$o1,3"
