"""physinf-generate, run as the installed console script."""

import json
import subprocess

from installed import installed_command

CLI = installed_command('physinf-generate', 'physinf_ros.cli')


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


def test_missing_model_is_a_clear_error():
    result = run('--prompt', 'Hi', '--model', '/nonexistent/robot.gguf')
    assert result.returncode == 2
    assert 'GGUF file not found: /nonexistent/robot.gguf' in result.stderr
