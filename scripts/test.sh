#!/usr/bin/env bash
# Build the package with colcon and run its tests (unit, ROS integration, linters) with
# colcon test, exactly as on a robot's workspace, inside the project's .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
. .venv/bin/activate
# A private ROS domain per run keeps the tests' nodes away from anything else on the network.
export ROS_DOMAIN_ID=${ROS_DOMAIN_ID:-$(( 100 + RANDOM % 100 ))}
export ROS_AUTOMATIC_DISCOVERY_RANGE=${ROS_AUTOMATIC_DISCOVERY_RANGE:-LOCALHOST}
for d in build install log; do mkdir -p $d && touch $d/COLCON_IGNORE; done
colcon build --base-paths . --build-base build --install-base install
colcon test --base-paths . --build-base build --install-base install \
  --event-handlers console_direct+ --return-code-on-test-failure --pytest-args -ra ${PYTEST_ARGS:-}
colcon test-result --test-result-base build --verbose > build/test_result.txt || rc=$?
cat build/test_result.txt
# A run that collected nothing is a broken run, not a green one.
if grep -q '^Summary: 0 tests' build/test_result.txt; then echo 'no tests ran' >&2; exit 1; fi
exit "${rc:-0}"
