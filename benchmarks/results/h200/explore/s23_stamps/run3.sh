#!/usr/bin/env bash
# Session 23, run 3: v26 and v27 (the step timed by its own kernels; its token written into the
# pinned host row by its last kernel). The GPU kernel tests first, then the protocol's sessions,
# the tree's decoder against HEAD's package (8806e11, its physinf_ros/ and config/ in
# .carry/pkg_base/) taking turns in one process (s21_start/inproc.py, 10 pairs a cell): the
# robot shapes at ctx 2048, the 8B at 2048 and 16384.
exec bash "$(dirname "$0")/run1.sh" run3
