"""physinf-generate, run as the installed console script."""

import json
import subprocess

from installed import installed_command
import pytest

CLI = installed_command('physinf-generate')


def run(*args):
    return subprocess.run(CLI + list(args), capture_output=True, text=True, timeout=300)


def test_generate_streams_the_reply_and_ends_with_json():
    result = run('--prompt', 'What is the capital of France?', '--device', 'cpu', '--json')
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    record = json.loads(lines[-1])
    assert 'Paris' in record['text']
    assert lines[0].startswith(record['text'])  # the streamed reply precedes the JSON
    assert record['backend'] == 'eager' and record['device'] == 'cpu'   # auto on a CPU
    assert record['model'].startswith('SmolLM2-135M')
    assert len(record['step_ms']) == len(record['token_ids']) > 0
    assert record['ttft_ms'] > 0 and record['finish_reason'] == 'eos'


def test_generate_with_sampling_options():
    result = run('--prompt', 'Hi', '--device', 'cpu', '--temperature', '0.8', '--top-p', '0.9',
                 '--seed', '3', '--max-new-tokens', '4', '--json')
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(record['token_ids']) <= 4


def test_a_seeded_reply_with_deterministic_kernels_repeats():
    args = ('--prompt', 'Name a robot.', '--device', 'cpu', '--temperature', '1.2', '--seed',
            '5', '--max-new-tokens', '6', '--deterministic', '--json')
    replies = [run(*args) for _ in range(2)]
    for result in replies:
        assert result.returncode == 0, result.stderr
    first, second = (json.loads(r.stdout.strip().splitlines()[-1]) for r in replies)
    assert first['token_ids'] == second['token_ids'] and first['token_ids']


def test_missing_model_is_a_clear_error():
    result = run('--prompt', 'Hi', '--model', '/nonexistent/robot.gguf')
    assert result.returncode == 2
    assert 'GGUF file not found: /nonexistent/robot.gguf' in result.stderr


def test_generate_follows_a_json_schema_file(tmp_path):
    schema = {'type': 'object', 'properties': {'city': {'enum': ['Paris', 'Lyon', 'Nice']}},
              'required': ['city'], 'additionalProperties': False}
    path = tmp_path / 'city.json'
    path.write_text(json.dumps(schema))
    result = run('--prompt', 'What is the capital of France?', '--device', 'cpu',
                 '--json-schema', str(path), '--json')
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout.strip().splitlines()[-1])
    assert json.loads(record['text']) == {'city': 'Paris'}
    assert record['finish_reason'] == 'eos' and record['tool_calls'] == []


def test_generate_calls_a_tool_and_reports_the_call(tmp_path):
    tools = [{'type': 'function', 'function': {
        'name': 'goto', 'parameters': {
            'type': 'object', 'properties': {'room': {'enum': ['kitchen', 'office']}},
            'required': ['room'], 'additionalProperties': False}}}]
    path = tmp_path / 'tools.json'
    path.write_text(json.dumps(tools))
    result = run('--prompt', 'Go to the kitchen.', '--device', 'cpu', '--tools', str(path),
                 '--tool-choice', 'required', '--json')
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout.strip().splitlines()[-1])
    assert [call['name'] for call in record['tool_calls']] == ['goto']


def test_a_grammar_that_does_not_compile_is_a_clear_error(tmp_path):
    path = tmp_path / 'bad.lark'
    path.write_text('start: greeting')
    result = run('--prompt', 'Hi', '--device', 'cpu', '--grammar', str(path))
    assert result.returncode == 2
    assert 'grammar does not compile' in result.stderr and 'greeting' in result.stderr


COPY = 'Repeat exactly: the quick brown fox jumps over the lazy dog.'


def reply(*args):
    # Later options win: a test may give its own --max-new-tokens.
    result = run('--prompt', COPY, '--device', 'cpu', '--max-new-tokens', '24', '--json', *args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


@pytest.fixture(scope='module')
def plain_reply():
    return reply()[0]


def test_without_speculation_every_step_makes_one_token(plain_reply):
    assert plain_reply['speculation'] == 'off' and plain_reply['tokens_per_step'] == 1.0
    assert plain_reply['verify_steps'] == plain_reply['drafted_tokens'] == 0


def test_prompt_lookup_gives_the_greedy_reply_in_fewer_steps(plain_reply):
    record, log = reply('--speculation', 'ngram:4')
    assert record['text'] == plain_reply['text']
    assert record['token_ids'] == plain_reply['token_ids']
    assert record['speculation'] == 'ngram:4' and record['verify_steps'] > 0
    assert 0 < record['accepted_tokens'] <= record['drafted_tokens'] <= 4 * record['verify_steps']
    assert 1.0 < record['tokens_per_step'] <= 5
    accepted = f"{record['accepted_tokens']} of {record['drafted_tokens']} drafted tokens accepted"
    assert (f"speculation ngram:4: {record['tokens_per_step']:.2f} tokens per step, {accepted}"
            in log)


def test_a_draft_model_equal_to_the_model_has_every_drafted_token_accepted(plain_reply):
    # The embedded model drafting for itself: its greedy drafts are the model's own choices.
    # The reply ends at its length, before its end of sequence: no verify step keeps tokens
    # past the end (drafts are cut to the tokens left), so every drafted token is handed out.
    record, log = reply('--speculation', 'draft:embedded:3', '--max-new-tokens', '8')
    assert record['token_ids'] == plain_reply['token_ids'][:8]
    assert record['finish_reason'] == 'length' and record['verify_steps'] > 0
    assert record['accepted_tokens'] == record['drafted_tokens'] > 0
    assert 'speculation draft:embedded:3: ' in log


@pytest.mark.parametrize('value, words', [
    ('ngram:9', "speculation 'ngram:9': K must be an integer from 1 to 8"),
    ('draft:3', "speculation 'draft:3': use off, ngram:K or draft:MODEL:K"),
])
def test_a_bad_speculation_is_refused_with_its_reason(value, words):
    result = run('--prompt', 'Hi', '--speculation', value)
    assert result.returncode == 2 and words in result.stderr


def test_a_backend_that_cannot_verify_drafts_is_a_clear_error():
    result = run('--prompt', 'Hi', '--device', 'cpu', '--backend', 'hf', '--speculation',
                 'ngram:2')
    assert result.returncode == 2
    assert 'backend hf cannot verify drafts' in result.stderr
