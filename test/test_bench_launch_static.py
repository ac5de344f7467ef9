"""Static checks of bench.launch.py and config/bench.yaml, where `launch` cannot run."""

from pathlib import Path

from installed import console_scripts
from launch_stub import describe, parts
from physinf_ros.bench.params import BENCH_PARAMS, check, PARAMS_BY_NAME, plan, problems
import yaml

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = ROOT / 'launch' / 'bench.launch.py'


def test_every_bench_parameter_is_a_launch_argument_and_only_given_ones_override():
    arguments, node = parts(describe('bench.launch.py'))
    assert node.kwargs['executable'] == 'benchmark_node' and node.kwargs['name'] == 'benchmark'
    assert {'benchmark_node', 'physinf-bench', 'physinf-report'} <= console_scripts().keys()
    assert set(arguments) == {p.name for p in BENCH_PARAMS} | {'namespace', 'params_file'}
    assert all(argument.kwargs['description'] for argument in arguments.values())
    assert all(arguments[p.name].kwargs['default_value'] == '' for p in BENCH_PARAMS)
    params_file, = node.kwargs['parameters']   # nothing given: params_file's values hold
    assert params_file.args == ('params_file',)
    assert "'config', 'bench.yaml'" in LAUNCH.read_text()


def test_given_bench_arguments_reach_the_node_typed():
    given = {'contexts': '2048', 'sessions': '3', 'price_per_hour': '2', 'exit_when_done': 'true',
             'out_dir': '/tmp/bench'}
    _, node = parts(describe('bench.launch.py'), **given)
    _, overrides = node.kwargs['parameters']
    # A lone context such as 2048 stays a string; sessions an integer; a price a float.
    assert overrides == {'contexts': '2048', 'sessions': 3, 'price_per_hour': 2.0,
                         'exit_when_done': True, 'out_dir': '/tmp/bench'}
    for name, value in overrides.items():
        assert type(value) is type(PARAMS_BY_NAME[name].default)


def test_bench_config_names_every_parameter_with_its_default():
    data = yaml.safe_load((ROOT / 'config' / 'bench.yaml').read_text())
    (node_key, section), = data.items()
    assert node_key.endswith('benchmark')
    values = section['ros__parameters']
    assert set(values) == {p.name for p in BENCH_PARAMS}
    for name, value in values.items():
        assert check(name, value) is None, check(name, value)
        assert value == PARAMS_BY_NAME[name].default
    assert problems(values) == []
    defaults = plan(values)
    assert defaults.contexts == (2048, 4096, 8192, 16384)
    assert defaults.modes == ('eager', 'graphed')
    assert (defaults.warmup, defaults.steps, defaults.sessions) == (5, 30, 10)


def test_parameter_checks_name_the_problem():
    good = {p.name: p.default for p in BENCH_PARAMS}
    assert 'integers' in ' '.join(problems(dict(good, contexts='2048,lots')))
    refused = ' '.join(problems(dict(good, modes='eager,warp')))
    assert "mode 'warp' refused: unknown backend" in refused
    assert 'target must be empty or one of' in ' '.join(problems(dict(good, target='tpu')))
    assert 'sessions must be within' in ' '.join(problems(dict(good, sessions=0)))
    assert plan(dict(good, backend='hf')).modes == ('hf',)
