#!/usr/bin/env bash
# Build the package and its interface package with colcon and run the package's tests (unit,
# ROS integration, linters) with colcon test, exactly as on a robot's workspace, inside the
# project's .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
. .venv/bin/activate
# A private ROS domain per run keeps the tests' nodes away from anything else on the network.
export ROS_DOMAIN_ID=${ROS_DOMAIN_ID:-$(( 100 + RANDOM % 100 ))}
export ROS_AUTOMATIC_DISCOVERY_RANGE=${ROS_AUTOMATIC_DISCOVERY_RANGE:-LOCALHOST}
# The ROS wheels install their ament index into .venv; CMake finds the interface generators
# there only through AMENT_PREFIX_PATH, which nothing else sets.
export AMENT_PREFIX_PATH="$PWD/.venv${AMENT_PREFIX_PATH:+:$AMENT_PREFIX_PATH}"
# Outputs, not sources: colcon skips them, and so do the linters (install/ holds the
# interface package's generated Python, which is not written to this repository's style).
for d in build install log; do mkdir -p $d && touch $d/COLCON_IGNORE $d/AMENT_IGNORE; done
# colcon does not look inside a package (the repository root) for more packages: name the
# interface package's folder.
colcon build --base-paths . interfaces --build-base build --install-base install
# The interface package has no tests of its own; test/test_interfaces.py checks it from here.
colcon test --base-paths . interfaces --packages-select physinf_ros \
  --build-base build --install-base install \
  --event-handlers console_direct+ --return-code-on-test-failure --pytest-args -ra ${PYTEST_ARGS:-}
colcon test-result --test-result-base build --verbose > build/test_result.txt || rc=$?
cat build/test_result.txt
# A run that collected nothing is a broken run, not a green one.
if grep -q '^Summary: 0 tests' build/test_result.txt; then echo 'no tests ran' >&2; exit 1; fi
exit "${rc:-0}"
