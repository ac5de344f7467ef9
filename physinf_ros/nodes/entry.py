"""
The nodes' console scripts: a Ctrl-C while a node is still importing torch ends it quietly.

A console script imports its module before main() runs, and torch takes seconds to import on a
small CPU: an interrupt then would print a traceback from inside torch and exit with -2. These
entry points take SIGINT and SIGTERM first, import the node, and run its main().
"""

import importlib
import signal
import sys


def take_signals() -> None:
    """Make SIGINT and SIGTERM raise KeyboardInterrupt in the main thread."""
    signal.signal(signal.SIGTERM, _interrupt)
    # Python leaves SIGINT ignored when the parent ignored it (a background job, nohup):
    # Ctrl-C and launch's SIGINT must stop the node all the same.
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _run(module: str) -> int:
    take_signals()
    try:
        main = importlib.import_module(f'physinf_ros.nodes.{module}').main
    except KeyboardInterrupt:
        print(f'[{module}] interrupted while starting: stopped', file=sys.stderr)
        return 0
    return main()


def decoder_node() -> int:
    """Run decoder_node."""
    return _run('decoder_node')


def benchmark_node() -> int:
    """Run benchmark_node."""
    return _run('benchmark_node')
