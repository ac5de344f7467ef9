"""Find the package's console scripts as a user would run them (no ROS imports here)."""

import ast
import importlib.util
import os
from pathlib import Path
import shutil
import sys

import pytest

ROOT = Path(__file__).resolve().parents[2]


def installed_command(script):
    """
    Find an installed console script (where ros2 run looks), else run its entry point as it would.

    Without an install (a GPU machine's checkout) the fallback calls setup.py's entry point of
    the script, not its module's __main__: the nodes' entry points take the signals before the
    module's imports (nodes/entry.py), which a Ctrl-C while starting must meet.
    """
    try:
        from ament_index_python.packages import get_package_prefix
        exe = Path(get_package_prefix('physinf_ros')) / 'lib' / 'physinf_ros' / script
        if exe.is_file():
            return [str(exe)]
    except Exception:  # noqa: B902 - not in an ament prefix: fall back below
        pass
    found = shutil.which(script)
    if found:
        return [found]
    module, function = console_scripts()[script].split(':')
    return [sys.executable, '-c',
            f'import sys; from {module} import {function}; sys.exit({function}())']


def require_interfaces():
    """
    Skip the calling test module where physinf_ros_interfaces is not built (never under colcon).

    colcon sets COLCON in the environment of everything it runs; there (make test) the interface
    package is built and sourced, so its absence is a failure, never a skip.
    """
    if importlib.util.find_spec('physinf_ros_interfaces') is None and 'COLCON' not in os.environ:
        pytest.skip('physinf_ros_interfaces is not built or not sourced: run make test, or '
                    'colcon build --base-paths . interfaces and source install/setup.bash',
                    allow_module_level=True)


def _calls(tree, name):
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)
            and getattr(node.func, 'id', getattr(node.func, 'attr', None)) == name]


def console_scripts():
    """Return the console scripts setup.py declares: name -> 'module:function'."""
    tree = ast.parse((ROOT / 'setup.py').read_text())
    scripts = next(kw.value for call in _calls(tree, 'setup') for kw in call.keywords
                   if kw.arg == 'entry_points')
    entries = ast.literal_eval(scripts)['console_scripts']
    return dict((part.strip() for part in entry.split('=')) for entry in entries)
