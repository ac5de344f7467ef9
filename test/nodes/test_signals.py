"""nodes/entry.py's signal policy, without ROS: a signal while spinning waits for spin_once."""

import signal
import sys

from physinf_ros.nodes import entry
import pytest

STEPS = 1000


@pytest.fixture
def taken():
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    hook = sys.unraisablehook
    entry.take_signals()
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)
    sys.unraisablehook = hook


class Finalized:
    """Raises signum in its __del__, where Python drops what the handler raises."""

    def __init__(self, signum):
        self.signum = signum

    def __del__(self):
        signal.raise_signal(self.signum)   # the handler runs at this method's next bytecode
        sum(range(10))


class Broken:
    """A finalizer that fails for its own reason."""

    def __del__(self):
        raise ValueError('broken finalizer')


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
def test_a_signal_while_spinning_is_raised_when_spin_once_returns_and_after(taken, signum):
    executor = Executor(signum)
    with pytest.raises(KeyboardInterrupt):
        entry.spin_once(executor, 0.1)
    assert executor.steps == STEPS   # the executor's work was not cut short
    # A signal means stop: a later spin_once raises again, and spins no more.
    quiet = Executor()
    with pytest.raises(KeyboardInterrupt):
        entry.spin_once(quiet, 0.1)
    assert quiet.steps == 0


def test_a_fresh_start_of_the_signal_policy_has_nothing_pending(taken):
    quiet = Executor()
    entry.spin_once(quiet, 0.1)
    assert quiet.steps == STEPS


@pytest.mark.parametrize('signum', [signal.SIGINT, signal.SIGTERM])
def test_a_signal_whose_exception_a_finalizer_dropped_is_raised_by_the_next_spin_once(
        taken, signum, monkeypatch):
    # On CI a decoder interrupted while its model loaded served on: the handler ran inside a
    # __del__ (regex's, in a garbage collection), where Python prints and drops exceptions.
    dropped = []
    monkeypatch.setattr(sys, 'unraisablehook', lambda raised: dropped.append(raised.exc_type))
    Finalized(signum)
    assert dropped == [KeyboardInterrupt]   # lost there, as on CI
    executor = Executor()
    with pytest.raises(KeyboardInterrupt):
        entry.spin_once(executor, 0.1)
    assert executor.steps == 0   # raised before spinning again


@pytest.mark.parametrize('signum', [signal.SIGINT, signal.SIGTERM])
def test_a_signal_outside_spin_once_is_raised_at_once(taken, signum):
    steps = 0
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signum)
        for _ in range(STEPS):
            steps += 1
    assert steps < STEPS


@pytest.mark.parametrize('second', [signal.SIGINT, signal.SIGTERM])
def test_a_second_signal_while_stopping_is_only_noted(taken, second):
    # Ctrl-C on ros2 launch: SIGINT from the terminal and from launch, then maybe SIGTERM.
    stopped = []
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)
    signal.raise_signal(second)   # raised into the stop the first began, it would cut it short
    stopped.append('results delivered')
    assert stopped == ['results delivered']
    with pytest.raises(KeyboardInterrupt):
        entry.spin_once(Executor(), 0.1)   # still stopping: no more spinning as usual


def test_signals_within_held_signals_are_noted_then_raised_by_spin_once(taken):
    with entry.held_signals():
        signal.raise_signal(signal.SIGTERM)
        done = True
    assert done
    with pytest.raises(KeyboardInterrupt):
        entry.spin_once(Executor(), 0.1)


def test_a_dropped_signal_is_not_reported_and_other_dropped_errors_are(taken, monkeypatch):
    # Python's report of the dropped KeyboardInterrupt (a traceback in the node's log) would
    # read as a failure on a clean Ctrl-C; a finalizer's own error is still reported.
    reported = []
    monkeypatch.setattr(sys, '__unraisablehook__', lambda raised: reported.append(raised.exc_type))
    entry.take_signals()   # its hook, in this test's own phase (pytest sets one per phase)
    Broken()
    Finalized(signal.SIGINT)
    assert reported == [ValueError]
