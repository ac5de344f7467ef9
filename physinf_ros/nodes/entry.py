"""
The console scripts of the nodes and the client: a Ctrl-C or SIGTERM while starting ends quietly.

A console script imports its module before main() runs, and torch takes seconds to import on a
small CPU. An exception raised from a signal handler then unwinds through whatever import is
running, C++ initialisers included: interrupts in that time were seen to fail rclpy's import
("initialization failed", exit 1), to abort in pybind11 code ("terminate called after throwing
... KeyboardInterrupt", exit -6) and, once on CI, to hang the process. So until ROS is up
(common.start_ros) either signal ends the process at once, exit 0: nothing is held yet that
needs closing. From then on both raise KeyboardInterrupt in the main thread (take_signals), and
the node ends its requests and says so. While the main thread is in an executor's spin_once
(spin_once below) the signal is held until it returns: raised inside rclpy's executor, the
exception would unwind through code not written for it (RELIABILITY.md, Cancellation). Every
signal is also noted: Python drops an exception raised while the main thread runs a finalizer
(a garbage collection during the model load once swallowed one, and the node served on), so
the next spin_once raises it, and Python's report of the dropped one is not printed. Once the
node is stopping, a further signal is only noted: the node is delivering its requests'
results, within a bounded time, and a signal raised into that would lose them (held_signals
holds even the first for a block).
"""

from contextlib import contextmanager
import faulthandler
import importlib
import os
import signal
import sys


def exit_while_starting(name: str) -> None:
    """Make SIGINT and SIGTERM end the process at once with exit 0, saying so."""
    message = f'[{name}] interrupted while starting: stopped\n'.encode()

    def stop(signum, frame):
        os.write(2, message)
        os._exit(0)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)


class _Held:
    spinning = False   # the main thread is in spin_once: note a signal, do not raise it
    pending = False    # a signal came: every later spin_once raises KeyboardInterrupt


def take_signals() -> None:
    """Make SIGINT and SIGTERM raise KeyboardInterrupt in the main thread (held in spin_once)."""
    # Python leaves SIGINT ignored when the parent ignored it (a background job, nohup):
    # Ctrl-C and launch's SIGINT must stop the node all the same, so both are set here.
    _Held.pending = False
    sys.unraisablehook = _unraisable
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)


def _unraisable(unraisable) -> None:
    # A signal's KeyboardInterrupt dropped in a finalizer is no error to print: it was noted,
    # and the next spin_once raises it. Anything else is reported as Python reports it.
    if unraisable.exc_type is KeyboardInterrupt and _Held.pending:
        return
    sys.__unraisablehook__(unraisable)


def _interrupt(signum, frame):
    # Noted before it is raised: raised inside a finalizer (__del__, a weakref callback), the
    # KeyboardInterrupt is printed and dropped, and the process would go on. Only the first
    # is raised: Ctrl-C on ros2 launch reaches the node twice at once (from the terminal and
    # from launch), and a second KeyboardInterrupt would cut short the stop the first began;
    # were the first dropped, the next spin_once raises it.
    first = not _Held.pending
    _Held.pending = True
    if first and not _Held.spinning:
        raise KeyboardInterrupt


def spin_once(executor, timeout_sec: float) -> None:
    """executor.spin_once, raising KeyboardInterrupt before or after it once a signal came."""
    if _Held.pending:   # its exception was dropped (or caught) on the way: stop all the same
        raise KeyboardInterrupt
    _Held.spinning = True
    try:
        executor.spin_once(timeout_sec=timeout_sec)
    finally:
        _Held.spinning = False
    if _Held.pending:
        raise KeyboardInterrupt


@contextmanager
def held_signals():
    """Within the block, SIGINT and SIGTERM are noted, never raised: the node is stopping."""
    _Held.spinning = True
    try:
        yield
    finally:
        _Held.spinning = False


def _run(module: str) -> int:
    # A crash in native code (rcl, the DDS library, torch) then leaves each thread's Python
    # stack in the node's log: once on CI a losing decoder ended by SIGSEGV with no word of where.
    faulthandler.enable()
    exit_while_starting(module)
    return importlib.import_module(f'physinf_ros.nodes.{module}').main()


def decoder_node() -> int:
    """Run decoder_node."""
    return _run('decoder_node')


def benchmark_node() -> int:
    """Run benchmark_node."""
    return _run('benchmark_node')


def prompt_client() -> int:
    """Run the prompt client; its rclpy.init installs rclpy's own signal handlers."""
    return _run('prompt_client')
