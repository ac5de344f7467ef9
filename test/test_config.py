"""Parameter validation: bad values are refused with a reason that names the problem."""

from physinf_ros.config import check
import pytest


@pytest.mark.parametrize('name, value, words', [
    ('temperature', -0.5, ['temperature', '[0.0, 5.0]']),
    ('temperature', 1, ['must be a float']),
    ('top_p', 0.0, ['top_p']),
    ('max_new_tokens', 0, ['max_new_tokens', '[1, 32768]']),
    ('backend', 'turbo', ['backend must be one of']),
    ('device', 'tpu', ['device must be']),
    ('dtype', 'int3', ['dtype must be one of']),
    ('model', '  ', ['must not be empty']),
    ('no_such_thing', 1, ['unknown parameter']),
])
def test_bad_values_are_refused_with_a_reason(name, value, words):
    reason = check(name, value)
    assert reason is not None
    for word in words:
        assert word in reason


@pytest.mark.parametrize('name, value', [
    ('temperature', 0.7), ('top_p', 0.9), ('max_new_tokens', 16), ('device', 'cuda:1'),
    ('seed', 1234), ('system_prompt', 'You are a robot.'), ('use_chat_template', False),
])
def test_good_values_pass(name, value):
    assert check(name, value) is None
