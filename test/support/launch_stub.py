"""
Run a launch file's generate_launch_description() where launch is not installed.

launch and launch_ros are not on PyPI, so CI cannot run `ros2 launch`; here the classes a
launch file uses are recorders, and the description it builds can be checked: which node
starts, with which arguments, parameters and parameter types.
"""

from contextlib import contextmanager
import importlib.util
from pathlib import Path
import sys
import types

ROOT = Path(__file__).resolve().parents[2]


class Recorded:
    """Stands in for a launch class: keeps what it was built with."""

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


class LaunchDescription(Recorded):
    pass


class DeclareLaunchArgument(Recorded):

    @property
    def name(self):
        return self.args[0]


class LaunchConfiguration(Recorded):
    pass


class Node(Recorded):
    pass


class ParameterValue(Recorded):
    pass


STUBS = {
    'launch': {'LaunchDescription': LaunchDescription},
    'launch.actions': {'DeclareLaunchArgument': DeclareLaunchArgument},
    'launch.substitutions': {'LaunchConfiguration': LaunchConfiguration},
    'launch_ros.actions': {'Node': Node},
    'launch_ros.parameter_descriptions': {'ParameterValue': ParameterValue},
    'ament_index_python.packages': {'get_package_share_directory': lambda package: str(ROOT)},
}


@contextmanager
def _stubbed():
    saved = {name: sys.modules.get(name) for name in list(STUBS) + ['physinf_ros.launch_args']}
    for name, attributes in STUBS.items():
        module = types.ModuleType(name)
        module.__dict__.update(attributes)
        sys.modules[name] = module
    sys.modules.pop('physinf_ros.launch_args', None)
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def describe(launch_file):
    """Build the LaunchDescription of launch/<launch_file>, made of recorders."""
    with _stubbed():
        spec = importlib.util.spec_from_file_location('launch_file',
                                                      ROOT / 'launch' / launch_file)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.generate_launch_description()


def parts(description):
    """Return (the declared arguments by name, the one Node) of a description."""
    entities = description.args[0]
    arguments = {e.name: e for e in entities if isinstance(e, DeclareLaunchArgument)}
    node, = [e for e in entities if isinstance(e, Node)]
    return arguments, node
