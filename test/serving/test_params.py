"""Parameter validation: bad values are refused with a reason that names the problem."""

from physinf_ros.serving.params import check
import pytest


@pytest.mark.parametrize('name, value, words', [
    ('temperature', -0.5, ['temperature', '[0.0, 5.0]']),
    ('temperature', 1, ['must be a float']),
    ('top_p', 1, ['top_p must be a float, got an integer 1 (write 1.0: ROS reads 1 as an '
                  'integer)']),
    ('top_p', True, ['top_p must be a float, got a boolean True']),
    ('top_p', 0.0, ['top_p']),
    ('max_new_tokens', 0, ['max_new_tokens', '[1, 32768]']),
    ('backend', 'turbo', ['unknown backend', 'graphed', 'hf-graphed']),
    ('backend', 'graphed:sdpa', ['only hf, hf-graphed take a stack']),
    ('backend', 'hf:nf5', ['unknown stack', 'bnb-nf4', 'sdpa-cudnn']),
    ('device', 'tpu', ['device must be']),
    ('dtype', 'int3', ['dtype must be one of']),
    ('model', '  ', ['must not be empty']),
    ('no_such_thing', 1, ['unknown parameter']),
    ('system_prompt', 'x' * 2**20,
     ['system_prompt is 1048576 bytes', 'max_prompt_bytes is 65536']),
    ('system_prompt', 'Obey\x07', ['system_prompt holds 1 control characters']),
    ('system_prompt', 'broken \ufffd', ['system_prompt is not valid text']),
])
def test_bad_values_are_refused_with_a_reason(name, value, words):
    reason = check(name, value)
    assert reason is not None
    for word in words:
        assert word in reason


@pytest.mark.parametrize('name, value', [
    ('temperature', 0.7), ('top_p', 0.9), ('max_new_tokens', 16), ('device', 'cuda:1'),
    ('seed', 1234), ('system_prompt', 'You are a robot.'), ('use_chat_template', False),
    ('backend', 'hf-graphed:sdpa-cudnn'), ('backend', 'hf:bnb-nf4'),
])
def test_good_values_pass(name, value):
    assert check(name, value) is None


def test_system_prompt_is_checked_against_the_nodes_max_prompt_bytes():
    long_prompt = 'x' * 100_000
    assert 'max_prompt_bytes is 65536' in check('system_prompt', long_prompt)
    assert check('system_prompt', long_prompt, {'max_prompt_bytes': 200_000}) is None
    # Lowering the limit below the system prompt in force is refused too, naming both.
    reason = check('max_prompt_bytes', 1000, {'system_prompt': 'x' * 2000})
    assert reason.startswith('max_prompt_bytes 1000 refused: system_prompt is 2000 bytes')
    assert check('max_prompt_bytes', 1000, {'system_prompt': 'Be terse.'}) is None
