#!/usr/bin/env bash
# Session 34 (prepared): run here, on the runs' returned folders, to file their profile stage
# outputs as benchmarks/results/h200/profile_s34/after_* (the names of profile_s6/ and
# profile_s10/) and print issue 14's per-kernel table, before (profile_s6/before_*) and after.
#   bash collect.sh FOLDER...   (each holding one or more of run1.tgz-run4.tgz)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$here/../../../../..
dest=$root/benchmarks/results/h200/profile_s34
mkdir -p "$dest"
scratch=$(mktemp -d)
for tgz in $(find "$@" -name 'run[1-4].tgz'); do
  tar xzf "$tgz" -C "$scratch"
  for kernels in "$scratch"/kernels_*.json; do
    [ -e "$kernels" ] || continue
    tag=$(basename "$kernels" .json); tag=${tag#kernels_}
    cp "$scratch/kernels_$tag.json" "$dest/after_kernels_$tag.json"
    cp "$scratch/profile_$tag.json" "$dest/after_profile_$tag.json"
    gzip -9 -c "$scratch/ncu_$tag.log" > "$dest/after_ncu_$tag.csv.gz"
  done
  rm -rf "${scratch:?}"/*
done
rmdir "$scratch"
cd "$root/benchmarks"
python3 step_table.py results/h200/profile_s6/before_kernels_*.json \
  results/h200/profile_s34/after_kernels_*.json --target h200
