"""
The benchmark node's parameters: names, defaults, ranges and checks, free of rclpy.

Every parameter is read once when the node starts (the run begins at once). Lists are
comma-separated strings, as on the physinf-bench command line.
"""

import os
from pathlib import Path
from typing import Any, Dict, List, Optional

from .protocol import DEFAULT_CONTEXTS, DEFAULT_MODES, parse_list, Plan
from ..engine import BACKENDS, EMBEDDED, MODEL_SPEC_HELP
from ..engine.decoders.stacks import STACK_HELP
from ..measurement.targets import load_targets
from ..serving.params import check_value, Param, PARAMS_BY_NAME as DECODER

MODES_HELP = ('Comma-separated modes to measure, the first the baseline of the A/B: backends ('
              + ', '.join(b for b in BACKENDS if b != 'auto') + '), hf and hf-graphed also as '
              'NAME:STACK with a stack of ' + STACK_HELP)

BENCH_PARAMS = (
    Param('model', EMBEDDED, MODEL_SPEC_HELP, read_only=True),
    Param('modes', ','.join(DEFAULT_MODES), MODES_HELP + '.', read_only=True),
    Param('backend', '', 'Measure this one backend instead of modes (empty: use modes).',
          read_only=True),
    Param('contexts', ','.join(str(c) for c in DEFAULT_CONTEXTS),
          'Comma-separated context lengths, each filled by a real prefill.', read_only=True),
    Param('steps', 30, 'Measured decode steps per session.', read_only=True, low=1, high=100000),
    Param('warmup', 5, 'Warm-up decode steps per session, not timed.', read_only=True,
          low=0, high=100000),
    Param('sessions', 10, 'Fresh sessions (Engine.renew) per cell; the A/B CI is over these.',
          read_only=True, low=1, high=1000),
    Param('device', 'auto', DECODER['device'].description, read_only=True),
    Param('dtype', 'auto', DECODER['dtype'].description, read_only=True,
          choices=DECODER['dtype'].choices),
    Param('seed', 0, 'Seed of the random prompts.', read_only=True, low=0, high=2**31 - 1),
    Param('target', '', 'Key of config/targets.yaml (empty: found by the GPU name, else a '
          'measured copy bandwidth).', read_only=True),
    Param('price_per_hour', 0.0, 'USD per hour of this target for cost per million tokens '
          '(0: the price in targets.yaml, if any).', read_only=True, low=0.0, high=10000.0),
    Param('out_dir', '', 'Folder for the results JSON and CSV (empty: $ROS_HOME/physinf_ros/'
          'bench, ~/.ros when ROS_HOME is unset).', read_only=True),
    Param('exit_when_done', False, 'Exit when the run is over (true) or stay up publishing the '
          'final diagnostics (false).', read_only=True),
)

PARAMS_BY_NAME = {p.name: p for p in BENCH_PARAMS}


def check(name: str, value: Any) -> Optional[str]:
    """Why value is not acceptable for benchmark parameter name, or None when it is."""
    param = PARAMS_BY_NAME.get(name)
    if param is None:
        return f'unknown parameter {name!r}'
    reason = check_value(param, value)
    if reason:
        return reason
    if name == 'contexts':
        try:
            parse_list(value, int)
        except ValueError:
            return f'contexts must be comma-separated integers; got {value!r}'
    if name == 'target' and value and value not in load_targets():
        return f'target must be empty or one of {", ".join(load_targets())}; got {value!r}'
    return None


def plan(settings: Dict[str, Any]) -> Plan:
    """Return the Plan the settings describe (check them first)."""
    modes = (settings['backend'],) if settings['backend'] else parse_list(settings['modes'])
    return Plan(model=settings['model'], modes=modes,
                contexts=parse_list(settings['contexts'], int), steps=settings['steps'],
                warmup=settings['warmup'], sessions=settings['sessions'],
                device=settings['device'], dtype=settings['dtype'], seed=settings['seed'])


def problems(settings: Dict[str, Any]) -> List[str]:
    """Return every reason the settings cannot run (empty when they can)."""
    wrong = [r for r in (check(name, value) for name, value in settings.items()) if r]
    return wrong or plan(settings).problems()


def out_dir(settings: Dict[str, Any]) -> Path:
    """Return the folder results go to."""
    if settings['out_dir']:
        return Path(settings['out_dir']).expanduser()
    ros_home = os.environ.get('ROS_HOME') or os.path.join(Path.home(), '.ros')
    return Path(ros_home) / 'physinf_ros' / 'bench'
