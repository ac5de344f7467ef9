"""
Checks of decode.launch.py and the default config, where `launch` cannot run.

launch and launch_ros are not on PyPI; test_decode_launch.py runs the real launch test wherever
they are installed. These checks run everywhere: the launch file builds its description with
recorders in place of launch's classes (support/launch_stub.py).
"""

from pathlib import Path

from installed import console_scripts
from launch_stub import describe, parts
from physinf_ros.engine import BACKENDS
from physinf_ros.serving.params import AUTOSTART, check, DECODER_PARAMS, PARAMS_BY_NAME
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = ROOT / 'launch' / 'decode.launch.py'


def test_every_decoder_parameter_is_a_launch_argument_not_given_by_default():
    arguments, node = parts(describe('decode.launch.py'))
    table = {p.name: p for p in DECODER_PARAMS + (AUTOSTART,)}
    assert set(arguments) == set(table) | {'namespace', 'params_file'}
    for name, param in table.items():
        # Empty is "not given": a default here would override params_file's value.
        assert arguments[name].kwargs['default_value'] == ''
        assert arguments[name].kwargs['description'].startswith(param.description)
    assert all(argument.kwargs['description'] for argument in arguments.values())
    # The backend's description names every backend, from the one table.
    assert all(name in arguments['backend'].kwargs['description'] for name in BACKENDS)


def test_launch_file_starts_the_decoder_with_params_file_alone_when_nothing_is_given():
    arguments, node = parts(describe('decode.launch.py'))
    assert node.kwargs['package'] == 'physinf_ros' and node.kwargs['name'] == 'decoder'
    assert node.kwargs['executable'] in console_scripts()
    params_file, = node.kwargs['parameters']   # nothing after it to override its values
    assert params_file.args == ('params_file',)
    assert arguments['params_file'].kwargs['default_value'] == str(ROOT / 'config' /
                                                                   'decoder.yaml')


@pytest.mark.parametrize('given, typed', [
    ({'max_new_tokens': '32'}, {'max_new_tokens': 32}),
    ({'temperature': '0.7', 'top_p': '1'}, {'temperature': 0.7, 'top_p': 1.0}),
    ({'model': '123', 'system_prompt': 'off'}, {'model': '123', 'system_prompt': 'off'}),
    ({'autostart': 'false', 'truncate_prompt': 'True'},
     {'autostart': False, 'truncate_prompt': True}),
    ({'queue_size': '2', 'seed': '-1'}, {'queue_size': 2, 'seed': -1}),
])
def test_given_arguments_reach_the_node_typed_and_only_they_override_params_file(given, typed):
    _, node = parts(describe('decode.launch.py'), **given)
    params_file, overrides = node.kwargs['parameters']
    assert params_file.args == ('params_file',)
    assert overrides == typed
    for name, value in overrides.items():
        assert type(value) is type(PARAMS_BY_NAME.get(name, AUTOSTART).default)


@pytest.mark.parametrize('name, text, words', [
    ('max_new_tokens', 'lots', 'max_new_tokens must be an integer'),
    ('max_new_tokens', '1.5', 'max_new_tokens must be an integer'),
    ('temperature', 'warm', 'temperature must be a number'),
    ('autostart', 'yes', 'autostart must be true or false'),
])
def test_an_argument_not_of_its_parameters_type_stops_the_launch_naming_it(name, text, words):
    with pytest.raises(ValueError, match=f'launch argument {name}:=.*{words}'):
        parts(describe('decode.launch.py'), **{name: text})


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
