"""Static checks of bench.launch.py and config/bench.yaml, where `launch` cannot run."""

import ast
from pathlib import Path

from physinf_ros.bench.params import BENCH_PARAMS, check, PARAMS_BY_NAME, plan, problems
from test_launch_static import _calls, _console_scripts, _kwarg
import yaml

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = ROOT / 'launch' / 'bench.launch.py'


def test_bench_launch_starts_benchmark_node_with_known_parameters():
    tree = ast.parse(LAUNCH.read_text())
    node, = _calls(tree, 'Node')
    assert ast.literal_eval(_kwarg(node, 'executable')) == 'benchmark_node'
    assert {'benchmark_node', 'physinf-bench', 'physinf-report'} <= _console_scripts()
    assert ast.literal_eval(_kwarg(node, 'name')) == 'benchmark'
    override, = [item for item in _kwarg(node, 'parameters').elts if isinstance(item, ast.Dict)]
    keys = {ast.literal_eval(key) for key in override.keys}
    assert keys == {'model', 'modes', 'contexts'} and keys <= set(PARAMS_BY_NAME)
    declared = {ast.literal_eval(call.args[0]): _kwarg(call, 'description')
                for call in _calls(tree, 'DeclareLaunchArgument')}
    assert all(desc is not None and ast.literal_eval(desc) for desc in declared.values())
    used = {ast.literal_eval(call.args[0]) for call in _calls(tree, 'LaunchConfiguration')}
    assert used <= set(declared)
    assert "'config', 'bench.yaml'" in LAUNCH.read_text()


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
    assert "unknown mode 'warp'" in ' '.join(problems(dict(good, modes='eager,warp')))
    assert 'target must be empty or one of' in ' '.join(problems(dict(good, target='tpu')))
    assert 'sessions must be within' in ' '.join(problems(dict(good, sessions=0)))
    assert plan(dict(good, backend='hf')).modes == ('hf',)
