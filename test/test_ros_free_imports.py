"""
Only physinf_ros/nodes/ needs ROS: every other module imports on a machine without it.

A fresh interpreter is given a meta-path finder that refuses ROS's Python packages (rclpy, launch,
launch_ros, ament_index_python, the message and service packages), then imports each module of
the package outside nodes/ and reports the ones that fail, with the ROS package they reached for.
"""

import json
from pathlib import Path
import subprocess
import sys

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / 'physinf_ros'

CHILD = r'''
import importlib, json, sys, traceback

ROS = {'rclpy', 'launch', 'launch_ros', 'ament_index_python', 'rpyutils', 'action_msgs',
       'builtin_interfaces', 'unique_identifier_msgs'}


def is_ros(name):
    top = name.partition('.')[0]
    return (top in ROS or top.endswith(('_msgs', '_srvs', '_interfaces'))
            or top.startswith(('rosidl', 'rcl', 'rmw')))


class NoRos:
    """Refuse ROS packages as if they were not installed."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if is_ros(name):
            raise ModuleNotFoundError(f'No module named {name!r} (ROS is absent here)', name=name)
        return None


sys.meta_path.insert(0, NoRos)
for name in [n for n in sys.modules if is_ros(n)]:
    del sys.modules[name]
try:
    import rclpy  # noqa: F401
    blocked = False
except ImportError:
    blocked = True
failures = {}
for module in json.loads(sys.argv[1]):
    try:
        importlib.import_module(module)
    except BaseException as exc:
        failures[module] = ''.join(traceback.format_exception_only(type(exc), exc)).strip()
print(json.dumps({'blocked': blocked, 'failures': failures}))
'''


def modules_outside_nodes():
    """Dotted names of every module of the package but those under nodes/."""
    names = []
    for path in sorted(PACKAGE.rglob('*.py')):
        parts = path.relative_to(REPO).with_suffix('').parts
        if parts[:2] == ('physinf_ros', 'nodes'):
            continue
        names.append('.'.join(parts[:-1] if parts[-1] == '__init__' else parts))
    return names


def test_every_module_outside_nodes_imports_without_ros():
    modules = modules_outside_nodes()
    assert 'physinf_ros.engine' in modules and len(modules) > 40, 'the package was not found'
    result = subprocess.run([sys.executable, '-c', CHILD, json.dumps(modules)], cwd=REPO,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report['blocked'], 'the child could still import rclpy: the check would prove nothing'
    assert not report['failures'], 'modules outside nodes/ that need ROS:\n' + '\n'.join(
        f'{module}: {error}' for module, error in report['failures'].items())
