"""
Static checks of the launch file and the default config, where `launch` cannot run.

launch and launch_ros are not on PyPI; test_decode_launch.py runs the real launch test wherever
they are installed. These checks run everywhere.
"""

import ast
from pathlib import Path

from physinf_ros.config import AUTOSTART, check, DECODER_PARAMS, PARAMS_BY_NAME
import yaml

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = ROOT / 'launch' / 'decode.launch.py'


def _calls(tree, name):
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)
            and getattr(node.func, 'id', getattr(node.func, 'attr', None)) == name]


def _kwarg(call, name):
    return next((kw.value for kw in call.keywords if kw.arg == name), None)


def _console_scripts():
    tree = ast.parse((ROOT / 'setup.py').read_text())
    scripts = next(kw.value for call in _calls(tree, 'setup') for kw in call.keywords
                   if kw.arg == 'entry_points')
    entries = ast.literal_eval(scripts)['console_scripts']
    return {entry.split('=')[0].strip() for entry in entries}


def test_launch_file_parses_and_names_existing_executables_and_parameters():
    tree = ast.parse(LAUNCH.read_text())
    assert any(isinstance(n, ast.FunctionDef) and n.name == 'generate_launch_description'
               for n in tree.body)
    nodes = _calls(tree, 'Node')
    assert nodes, 'the launch file starts no Node'
    for node in nodes:
        assert ast.literal_eval(_kwarg(node, 'package')) == 'physinf_ros'
        assert ast.literal_eval(_kwarg(node, 'executable')) in _console_scripts()
        overrides = [item for item in _kwarg(node, 'parameters').elts
                     if isinstance(item, ast.Dict)]
        for override in overrides:
            for key in override.keys:
                assert ast.literal_eval(key) in set(PARAMS_BY_NAME) | {AUTOSTART.name}


def test_launch_arguments_have_descriptions():
    tree = ast.parse(LAUNCH.read_text())
    declared = {ast.literal_eval(call.args[0]): _kwarg(call, 'description')
                for call in _calls(tree, 'DeclareLaunchArgument')}
    assert {'model', 'backend', 'autostart', 'namespace'} <= set(declared)
    assert all(desc is not None and ast.literal_eval(desc) for desc in declared.values())
    used = {ast.literal_eval(call.args[0]) for call in _calls(tree, 'LaunchConfiguration')}
    assert used <= set(declared), f'undeclared launch arguments: {used - set(declared)}'


def test_launch_file_loads_the_installed_config():
    source = LAUNCH.read_text()
    assert "'config', 'decoder.yaml'" in source
    assert (ROOT / 'config' / 'decoder.yaml').is_file()


def test_default_config_names_only_valid_parameters():
    data = yaml.safe_load((ROOT / 'config' / 'decoder.yaml').read_text())
    (node_key, section), = data.items()
    assert node_key.endswith('decoder')
    params = section['ros__parameters']
    assert set(params) == {p.name for p in DECODER_PARAMS}
    for name, value in params.items():
        assert check(name, value) is None, check(name, value)
        assert value == PARAMS_BY_NAME[name].default


def test_every_parameter_default_passes_its_own_check():
    for param in DECODER_PARAMS:
        assert param.description
        assert check(param.name, param.default) is None
