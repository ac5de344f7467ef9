#!/usr/bin/env bash
# Session 31, run 15 (on run 14's machine): carries the embedded GGUF's parts 2-3 for run 16.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../.."
OUT=$OUT benchmarks/run_device.sh carry > /dev/null 2>&1
echo "parts 2-3 stashed"
