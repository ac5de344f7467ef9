"""
What the two launch files share: launch arguments made from the nodes' parameter tables.

Every parameter of a node's table (serving/params.py, bench/params.py: the one source) is a
launch argument with its name and description. Its default is empty, meaning "not given": the
node gets only the arguments given on the launch line, so params_file's values (and then the
table's defaults) hold for the rest. A given argument reaches the node typed as its parameter
is: `model:=123` stays a string, `max_new_tokens:=32` is an integer, `top_p:=1` a float.
Imported by launch/*.launch.py only: it needs launch and launch_ros, which come with a ROS 2
distribution (they are not on PyPI).
"""

from typing import Any, Callable, Dict, Iterable, List

from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration

NOT_GIVEN = ''
_BOOLEANS = {'true': True, 'false': False}


def declare(params: Iterable) -> List[DeclareLaunchArgument]:
    """Declare one launch argument per config.Param; empty (not given) by default."""
    return [DeclareLaunchArgument(
        p.name, default_value=NOT_GIVEN,
        description=f'{p.description} Not given: params_file, else {_text(p.default)!r}.')
        for p in params]


def with_given(params: Iterable, start: Callable[[Dict[str, Any]], list]) -> OpaqueFunction:
    """Call start(the given arguments, typed as their parameters) once launch has resolved them."""
    params = tuple(params)

    def resolve(context) -> list:
        texts = {p.name: LaunchConfiguration(p.name).perform(context) for p in params}
        return start(given(params, texts))
    return OpaqueFunction(function=resolve)


def given(params: Iterable, texts: Dict[str, str]) -> Dict[str, Any]:
    """Return each launch argument not left empty (not given), typed as its parameter."""
    return {p.name: typed(p, texts[p.name]) for p in params
            if texts.get(p.name, NOT_GIVEN) != NOT_GIVEN}


def typed(param, text: str) -> Any:
    """Read a launch argument's text as its parameter's type; ValueError names the argument."""
    kind = type(param.default)
    try:
        if kind is bool:
            return _BOOLEANS[text.strip().lower()]
        return kind(text.strip()) if kind in (int, float) else text
    except (KeyError, ValueError):
        raise ValueError(f'launch argument {param.name}:={text!r}: {param.name} must be '
                         f'{_KIND[kind]}') from None


_KIND = {bool: 'true or false', int: 'an integer', float: 'a number'}


def _text(value) -> str:
    # Launch arguments are strings; booleans as YAML writes them.
    return str(value).lower() if isinstance(value, bool) else str(value)
