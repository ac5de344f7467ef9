"""
Run a launch file's generate_launch_description() where launch is not installed.

launch and launch_ros are not on PyPI, so CI cannot run `ros2 launch`; here the classes a
launch file uses are recorders, and the description it builds can be checked: which node
starts, with which arguments, parameters and parameter types. An OpaqueFunction's function runs
as launch would run it (run_opaque), against the launch arguments a launch line would leave.
"""

from contextlib import contextmanager
import importlib.util
from pathlib import Path
import sys
import types

ROOT = Path(__file__).resolve().parents[2]
LAUNCH_ARGS = 'physinf_ros.nodes.launch_args'   # imported anew under the stubs


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

    def perform(self, context):
        return context.launch_configurations[self.args[0]]


class OpaqueFunction(Recorded):
    pass


class Context:
    """What an OpaqueFunction's function reads: the launch arguments' values, as text."""

    def __init__(self, launch_configurations):
        self.launch_configurations = launch_configurations


class Node(Recorded):
    pass


class ParameterValue(Recorded):
    pass


STUBS = {
    'launch': {'LaunchDescription': LaunchDescription},
    'launch.actions': {'DeclareLaunchArgument': DeclareLaunchArgument,
                       'OpaqueFunction': OpaqueFunction},
    'launch.substitutions': {'LaunchConfiguration': LaunchConfiguration},
    'launch_ros.actions': {'Node': Node},
    'launch_ros.parameter_descriptions': {'ParameterValue': ParameterValue},
    'ament_index_python.packages': {'get_package_share_directory': lambda package: str(ROOT)},
}


@contextmanager
def _stubbed():
    saved = {name: sys.modules.get(name) for name in list(STUBS) + [LAUNCH_ARGS]}
    for name, attributes in STUBS.items():
        module = types.ModuleType(name)
        module.__dict__.update(attributes)
        sys.modules[name] = module
    sys.modules.pop(LAUNCH_ARGS, None)
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


def run_opaque(description, **given):
    """
    Run a description's OpaqueFunction as `ros2 launch ... NAME:=TEXT` would; return its Node.

    Every declared argument has its default unless given (as text, as on a launch line).
    """
    entities = description.args[0]
    values = {e.name: e.kwargs['default_value'] for e in entities
              if isinstance(e, DeclareLaunchArgument)}
    unknown = set(given) - set(values)
    assert not unknown, f'not launch arguments: {unknown}'
    values.update(given)
    opaque, = [e for e in entities if isinstance(e, OpaqueFunction)]
    node, = opaque.kwargs['function'](Context(values))
    assert isinstance(node, Node)
    return node


def parts(description, **given):
    """Return (the declared arguments by name, the one Node, run with given) of a description."""
    entities = description.args[0]
    arguments = {e.name: e for e in entities if isinstance(e, DeclareLaunchArgument)}
    return arguments, run_opaque(description, **given)
