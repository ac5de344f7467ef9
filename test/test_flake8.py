import subprocess
import sys

import pytest


@pytest.mark.flake8
@pytest.mark.linter
def test_flake8():
    # flake8 forks a pool of workers. Forked from this pytest process, which by now holds torch,
    # Triton kernels and rclpy threads, a worker can crash in garbage collection and leave the
    # pool waiting forever (a CI run on 2d2ecc9 hung that way), so it runs in a fresh interpreter.
    run = subprocess.run([sys.executable, '-m', 'ament_flake8.main'], capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, 'code style errors / warnings:\n' + run.stdout + run.stderr
