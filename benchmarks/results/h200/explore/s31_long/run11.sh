#!/usr/bin/env bash
# Session 31, run 11 (on run 10's machine): carries the embedded GGUF's parts 2-3 for run 12.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
OUT=$OUT benchmarks/run_device.sh carry > /dev/null 2>&1
echo "parts 2-3 stashed"
