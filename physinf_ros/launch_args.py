"""
What the two launch files share: launch arguments made from the nodes' parameter tables.

Each argument takes its parameter's name, default and description (serving/params.py and
bench/params.py are the one source), and reaches the node typed as the parameter is, so
`model:=123` or `model:=off` stays the string it was meant to be instead of a YAML integer or
boolean that the node refuses. Imported by launch/*.launch.py only: it needs launch and
launch_ros, which come with a ROS 2 distribution (they are not on PyPI).
"""

from typing import Dict, Iterable, List

from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.parameter_descriptions import ParameterValue


def declare(params: Iterable) -> List[DeclareLaunchArgument]:
    """Declare one launch argument per config.Param, with its default and description."""
    return [DeclareLaunchArgument(p.name, default_value=_text(p.default),
                                  description=p.description) for p in params]


def overrides(params: Iterable) -> Dict[str, ParameterValue]:
    """Map the node's parameters to those launch arguments, each of its parameter's type."""
    return {p.name: ParameterValue(LaunchConfiguration(p.name), value_type=type(p.default))
            for p in params}


def _text(value) -> str:
    # Launch arguments are strings; booleans as YAML writes them.
    return str(value).lower() if isinstance(value, bool) else str(value)
