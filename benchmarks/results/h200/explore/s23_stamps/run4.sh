#!/usr/bin/env bash
# Session 23, run 4: run 2's split at v27, where the copy is gone (probe.py: the protocol's
# step, the same replay and event with the token not read, two steps in flight, and the
# kernels' own step_ms), the robot shapes and the 8B at ctx 2048.
exec bash "$(dirname "$0")/run2.sh" run4
