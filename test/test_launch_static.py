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
import yaml

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = ROOT / 'launch' / 'decode.launch.py'


def _kwarg(call, name):
    return next((kw.value for kw in call.keywords if kw.arg == name), None)


def test_launch_file_starts_the_decoder_with_typed_overrides():
    arguments, node = parts(describe('decode.launch.py'))
    assert node.kwargs['package'] == 'physinf_ros' and node.kwargs['name'] == 'decoder'
    assert node.kwargs['executable'] in console_scripts()
    params_file, overrides = node.kwargs['parameters']
    assert params_file.args == ('params_file',)
    assert set(overrides) == {'model', 'backend', 'autostart'}
    for name, value in overrides.items():
        param = AUTOSTART if name == AUTOSTART.name else PARAMS_BY_NAME[name]
        # Typed as the parameter: model:=123 or model:=off stays a string.
        assert value.kwargs['value_type'] is type(param.default)
        assert value.args[0].args == (name,)
        text = str(param.default)
        assert arguments[name].kwargs['default_value'] == (
            text.lower() if isinstance(param.default, bool) else text)


def test_launch_arguments_have_descriptions():
    arguments, node = parts(describe('decode.launch.py'))
    assert {'model', 'backend', 'autostart', 'namespace', 'params_file'} == set(arguments)
    assert all(argument.kwargs['description'] for argument in arguments.values())
    # The backend's description names every backend, from the one table.
    assert all(name in arguments['backend'].kwargs['description'] for name in BACKENDS)
    assert arguments['model'].kwargs['description'] == PARAMS_BY_NAME['model'].description


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
