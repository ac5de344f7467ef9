"""Prompt admission and truncation: bad input is refused with a reason, before any tokenizer."""

import sys

from physinf_ros.engine import EngineError
from physinf_ros.serving.prompts import (admit, admit_messages, check_system_prompt,
                                         conversation_too_long, too_long, truncation_limit)
import pytest

LIMIT = 65536


@pytest.mark.parametrize('text, words', [
    ('', ['empty prompt', 'whitespace']),
    (' \t\n\u3000\u00a0 ', ['empty prompt', 'whitespace']),
    ('\x07\x1b\x7f', ['empty prompt', '3 control characters']),
    ('\u200b\u200b\u200b', ['empty prompt', 'invisible format characters']),
    ('\ufeff', ['empty prompt', 'U+FEFF']),
    (' \u200b\n\u2060\u200e\ufeff ', ['empty prompt', 'format characters']),
    ('hello\x00world', ['not valid text', 'NUL', 'character 5']),
    ('bad \ufffd bytes', ['not valid text', 'U+FFFD', 'invalid UTF-8', 'character 4']),
    ('lone \ud800 surrogate', ['not valid text', 'surrogate U+D800']),
    ('x' * (LIMIT + 1), ['65537 bytes', 'max_prompt_bytes is 65536']),
    ('é' * (LIMIT // 2 + 1), ['65538 bytes']),   # two bytes a character: bytes, not chars
])
def test_bad_prompts_are_refused_with_a_reason(text, words):
    admission = admit(text, LIMIT)
    assert not admission.ok
    for word in words:
        assert word in admission.reason


def test_control_characters_are_removed_and_counted_but_layout_stays():
    admission = admit('turn \x1b[31mleft\x1b[0m\tnow\r\nplease\x07', LIMIT)
    assert admission.ok
    assert admission.text == 'turn [31mleft[0m\tnow\r\nplease'
    assert admission.removed_controls == 3


def test_good_text_passes_unchanged():
    # A zero-width joiner inside an emoji and a byte-order mark before text: format characters
    # among visible ones stay.
    text = 'Where is the kitchen? 🤖 こんにちは, naïve “robot” 👩\u200d🔧 \ufeffok'
    admission = admit(text, LIMIT)
    assert admission.ok and admission.text == text and admission.removed_controls == 0
    assert admission.prompt_bytes == len(text.encode())


def test_a_2_mb_payload_is_refused_by_its_size_alone():
    payload = 'A' * (2 * 2**20)
    admission = admit(payload, LIMIT)
    assert not admission.ok and admission.prompt_bytes == 2 * 2**20
    assert str(2 * 2**20) in admission.reason


def test_too_long_names_the_token_counts():
    reason = too_long(3000, 1024)
    assert '3000 tokens' in reason and 'max_context is 1024' in reason
    assert 'truncate_prompt' in reason


def test_too_long_says_what_the_system_prompt_took():
    reason = too_long(3000, 1024, system_tokens=2900)
    assert '3000 tokens, 2900 of them system_prompt' in reason
    assert 'shorten system_prompt' in reason and 'truncate_prompt' not in reason
    reason = too_long(1100, 1024, system_tokens=20)
    assert '20 of them system_prompt' in reason and 'truncate_prompt' in reason


def test_engine_counts_the_system_prompt_tokens(embedded_engine):
    system_prompt = 'You are a careful robot. ' * 40
    assert embedded_engine.system_tokens('') == 0
    count = embedded_engine.system_tokens(system_prompt)
    with_it = len(embedded_engine.encode('Hi', system_prompt=system_prompt))
    # Its text replaces the template's default system text, which is shorter.
    assert 200 <= count < with_it <= count + len(embedded_engine.encode('Hi'))


@pytest.mark.parametrize('text, words', [
    ('x' * (LIMIT + 1), ['system_prompt is 65537 bytes', 'max_prompt_bytes is 65536']),
    ('Be terse.\x00', ['system_prompt is not valid text', 'NUL']),
    ('bad \ufffd', ['system_prompt is not valid text', 'U+FFFD']),
    ('lone \udc80', ['system_prompt is not valid text', 'surrogate U+DC80']),
    ('Be \x1b[31mred\x1b[0m.',
     ['system_prompt holds 2 control characters', 'U+001B', 'character 3']),
    ('\u200b\ufeff', ['system_prompt is only whitespace and invisible format characters',
                      'empty string']),
    ('   ', ['system_prompt is empty or only whitespace']),
])
def test_bad_system_prompts_are_refused_naming_system_prompt(text, words):
    reason = check_system_prompt(text, LIMIT)
    assert reason is not None
    for word in words:
        assert word in reason


@pytest.mark.parametrize('text', ['', 'Be terse.', 'Answer in French.\n\tOne line only.\r\n'])
def test_good_system_prompts_pass(text):
    assert check_system_prompt(text, LIMIT) is None


@pytest.mark.parametrize('max_context, max_new_tokens, limit', [
    (1024, 48, 976), (1024, 4000, 512), (64, 8, 56), (16, 16, 8)])
def test_truncation_leaves_room_for_the_reply(max_context, max_new_tokens, limit):
    assert truncation_limit(max_context, max_new_tokens) == limit


def test_truncation_keeps_the_end_of_the_text_and_a_whole_template(embedded_engine):
    text = ' '.join(f'word{i}' for i in range(600)) + ' Where is the kitchen?'
    full = embedded_engine.encode(text)
    ids, dropped = embedded_engine.encode_truncated(text, 200)
    assert len(full) > 200 >= len(ids) > 190
    assert dropped > 0
    decoded = embedded_engine.tokenizer.decode(ids)
    assert decoded.startswith('<|im_start|>system') and decoded.endswith('assistant\n')
    assert 'Where is the kitchen?' in decoded and 'word0 ' not in decoded


def test_a_prompt_that_fits_is_not_truncated(embedded_engine):
    ids, dropped = embedded_engine.encode_truncated('Hello there.', 200)
    assert ids == embedded_engine.encode('Hello there.') and dropped == 0


def test_truncation_refuses_when_the_template_alone_is_too_long(embedded_engine):
    with pytest.raises(EngineError, match='template and system prompt alone'):
        embedded_engine.encode_truncated('Hello ' * 50, 10)


HOSTILE = ['../../etc/passwd', '$(touch /tmp/physinf_pwned)', '`id`; rm -rf /',
           '{{ 7 * 7 }}{% for x in range(3) %}x{% endfor %}', "__import__('os').system('id')"]


@pytest.mark.parametrize('text', HOSTILE)
def test_prompts_are_data_never_paths_or_code(embedded_engine, text):
    # Python's audit hooks see every open, exec, compile, import and subprocess: none of them
    # may carry the prompt while it is checked, tokenised and decoded.
    seen = []
    watching = [True]

    def hook(event, args):
        if watching[0] and any(text in str(arg) for arg in args):
            seen.append(event)

    sys.addaudithook(hook)
    try:
        admission = admit(text, LIMIT)
        ids = embedded_engine.encode(admission.text)
        generation = embedded_engine.generate(ids, 2)
        list(generation)
    finally:
        watching[0] = False   # audit hooks cannot be removed; this one goes quiet
    assert admission.ok and admission.text == text
    assert text in embedded_engine.tokenizer.decode(ids), 'the prompt must reach the model as text'
    assert seen == []


def test_a_good_conversation_passes_with_its_controls_removed():
    conversation = admit_messages([('system', 'Be brief.'), ('user', 'Hi\x07'),
                                   ('assistant', ''), ('tool', '{"ok": true}')], 100)
    assert conversation.ok and conversation.removed_controls == 1
    assert conversation.messages == (('system', 'Be brief.'), ('user', 'Hi'), ('assistant', ''),
                                     ('tool', '{"ok": true}'))


@pytest.mark.parametrize('messages, words', [
    ([], 'empty conversation'),
    ([('robot', 'beep')], "message 0 ('robot') has no known role"),
    ([('user', 'hi'), ('system', 'x'), ('user', 'hi')], 'may only be the first'),
    ([('user', 'hi'), ('assistant', 'hello')], "the last message is 'assistant'"),
    ([('system', 'x')], "the last message is 'system'"),
    ([('user', 'hi'), ('user', '\u200b\ufeff ')], "message 1 ('user') is empty"),
    ([('user', '\x07\x1b')], 'only 2 control characters'),
    ([('user', 'a\ufffdb')], 'U+FFFD'),
    ([('user', 'a\x00b')], 'a NUL character'),
    ([('user', 'x' * 60), ('assistant', 'y' * 50), ('user', 'z')], '111 bytes of text'),
])
def test_a_bad_conversation_is_refused_with_a_reason(messages, words):
    conversation = admit_messages(messages, 100)
    assert not conversation.ok and words in conversation.reason, conversation.reason


def test_conversation_too_long_says_to_drop_old_turns():
    reason = conversation_too_long(3000, 2048)
    assert '3000 tokens' in reason and 'drop its oldest turns' in reason
