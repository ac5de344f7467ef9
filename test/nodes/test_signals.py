"""nodes/entry.py's signal policy, without ROS: a signal while spinning waits for spin_once."""

import signal

from physinf_ros.nodes import entry
import pytest

STEPS = 1000


@pytest.fixture
def taken():
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    entry.take_signals()
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


class Executor:
    """Raises signum inside spin_once, then goes on with its work, as rclpy's executor would."""

    def __init__(self, signum=None):
        self.signum, self.steps = signum, 0

    def spin_once(self, timeout_sec):
        if self.signum is not None:
            signal.raise_signal(self.signum)   # Python runs the handler at the next bytecode
        for _ in range(STEPS):
            self.steps += 1


@pytest.mark.parametrize('signum', [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_spinning_is_raised_once_spin_once_returns(taken, signum):
    executor = Executor(signum)
    with pytest.raises(KeyboardInterrupt):
        entry.spin_once(executor, 0.1)
    assert executor.steps == STEPS   # the executor's work was not cut short
    quiet = Executor()
    entry.spin_once(quiet, 0.1)   # raised once: nothing is left pending
    assert quiet.steps == STEPS


@pytest.mark.parametrize('signum', [signal.SIGINT, signal.SIGTERM])
def test_a_signal_outside_spin_once_is_raised_at_once(taken, signum):
    steps = 0
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signum)
        for _ in range(STEPS):
            steps += 1
    assert steps < STEPS
