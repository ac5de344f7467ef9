"""Nodes started on broken models or parameters exit non-zero naming the cause; Ctrl-C at start."""

import os
import signal
import subprocess
import sys
import time

from installed import installed_command
import pytest

NAMESPACE = f'/start{os.getpid()}'


def start_node(*ros_args, env=None):
    """Run decoder_node to its exit; return (exit code, seconds, its whole output)."""
    command = installed_command('decoder_node')
    start = time.monotonic()
    done = subprocess.run(command + ['--ros-args', '-r', f'__ns:={NAMESPACE}', *ros_args],
                          capture_output=True, text=True, timeout=180,
                          env=dict(os.environ, **(env or {})))
    return done.returncode, time.monotonic() - start, done.stdout + done.stderr


def signal_after(proc, words, signum):
    """Send signum once proc prints a line holding words (or after 120 s); return its output."""
    deadline = time.monotonic() + 120
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if words in line or time.monotonic() > deadline:
            break
    proc.send_signal(signum)
    return ''.join(lines) + proc.communicate(timeout=60)[0]


def corrupt_model_dir(folder):
    (folder / 'config.json').write_text('{"model_type": "llama", "hidden_size": ')
    return folder / 'config.json'


def write(path, text):
    path.write_text(text)
    return path


CASES = {
    'missing model file': lambda tmp: (['-p', 'model:=/nonexistent/x.gguf'],
                                       ['/nonexistent/x.gguf', 'not found']),
    'corrupt config.json': lambda tmp: (['-p', f'model:={tmp}'],
                                        [str(corrupt_model_dir(tmp)), 'JSON']),
    'corrupt params YAML': lambda tmp: (
        ['--params-file', str(write(tmp / 'bad.yaml', '/**/decoder:\n  ros__parameters:\n'
                                    '    model: [embedded\n  bad: : :\n'))],
        [str(tmp / 'bad.yaml'), "Couldn't parse params file"]),
    'missing params file': lambda tmp: (['--params-file', str(tmp / 'none.yaml')],
                                        [str(tmp / 'none.yaml')]),
    'wrongly typed parameter in YAML': lambda tmp: (
        ['--params-file', str(write(tmp / 'typed.yaml', '/**/decoder:\n  ros__parameters:\n'
                                    '    max_context: lots\n'))],
        [str(tmp / 'typed.yaml'), 'max_context must be an integer', "'lots'"]),
    'invalid parameter value': lambda tmp: (['-p', 'device:=tpu'], ['device must be']),
    'parameter out of range': lambda tmp: (['-p', 'max_context:=5'], ['max_context', 'range']),
    # `-p top_p:=1` is an integer to ROS; the node refuses it saying how to write the float.
    'float parameter given as an integer': lambda tmp: (
        ['-p', 'top_p:=1'], ['top_p must be a float, got an integer 1 (write 1.0']),
}


def test_enforced_security_without_keys_refuses_to_start(tmp_path, figures):
    # SROS2 with ROS_SECURITY_STRATEGY=Enforce: no enclave keys, no node (rcl checks this
    # before any DDS traffic, so it holds with the PyPI wheels too; see docs/RELIABILITY.md).
    code, seconds, output = start_node(
        '--enclave', '/physinf/decoder',
        env={'ROS_SECURITY_ENABLE': 'true', 'ROS_SECURITY_STRATEGY': 'Enforce',
             'ROS_SECURITY_KEYSTORE': str(tmp_path)})
    figures('startup fault: SROS2 enforced without keys', exit_code=code,
            message=next((line for line in output.splitlines() if 'FATAL' in line), ''))
    assert code == 1, output
    assert 'SECURITY ERROR' in output and str(tmp_path / 'enclaves' / 'physinf') in output


@pytest.mark.parametrize('case', CASES)
def test_broken_start_exits_non_zero_and_names_the_cause(tmp_path, case, figures):
    ros_args, words = CASES[case](tmp_path)
    code, seconds, output = start_node(*ros_args)
    figures(f'startup fault: {case}', exit_code=code, seconds=round(seconds, 2),
            message=next((line for line in output.splitlines() if 'FATAL' in line), ''))
    assert code == 1, output
    for word in words:
        assert word in output, output
    assert 'FATAL' in output and 'Traceback' not in output, output


# Interrupts spread over the decoder's start: on one 2-core host 0.1-1.4 s in is the imports
# (rclpy's C extension, torch), 1.3-2.4 s its name check before its node exists, later the model
# load. Each phase once failed in its own way (entry.py's docstring); a slower host shifts them.
# benchmark_node while importing, and 2.2 s in, as its worker thread loads the model and its
# main thread spins (docs/RELIABILITY.md). SIGTERM once, while the decoder imports.
@pytest.mark.parametrize('script, seconds, signum', [
    *[('decoder_node', s, signal.SIGINT) for s in (0.3, 0.7, 1.1, 1.6, 2.2, 3.0)],
    *[('benchmark_node', s, signal.SIGINT) for s in (0.3, 2.2)],
    ('decoder_node', 0.5, signal.SIGTERM)])
def test_a_signal_while_starting_exits_quietly(script, seconds, signum, tmp_path):
    command = installed_command(script)
    # What an interrupted benchmark measured is written: into this test's folder.
    out = ['-p', f'out_dir:={tmp_path}'] if script == 'benchmark_node' else []
    # A node that hangs instead of stopping gets SIGABRT below: its faulthandler (nodes/entry.py)
    # then prints every thread's stack.
    proc = subprocess.Popen(command + ['--ros-args', '-r', f'__ns:={NAMESPACE}', *out],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(seconds)
    proc.send_signal(signum)
    try:
        output, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        output, _ = proc.communicate(timeout=30)
        pytest.fail(f'still running 60 s after the signal; its threads then:\n{output}')
    assert proc.returncode == 0, output
    assert 'Traceback' not in output and 'stopped' in output, output


def test_a_crash_leaves_each_threads_stack_in_the_log():
    # A fatal signal from native code (rcl, the DDS library, torch) is reported by faulthandler,
    # which the node's entry point enables itself: not through PYTHONFAULTHANDLER, unset here.
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONFAULTHANDLER'}
    proc = subprocess.Popen(installed_command('decoder_node') + [
        '--ros-args', '-r', f'__ns:={NAMESPACE}crash', '-p', 'device:=cpu'],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    output = signal_after(proc, 'instance check', signal.SIGSEGV)
    assert proc.returncode == -signal.SIGSEGV, output
    assert 'Fatal Python error: Segmentation fault' in output, output
    assert 'decoder_node.py", line' in output, output


def test_prompt_client_imports_neither_torch_nor_the_engine():
    # A client needs only the decoder's interface (nodes/decoder_interface.py): torch and the
    # engine would take seconds to import on a small CPU before it could send its prompt.
    done = subprocess.run([sys.executable, '-c', 'import sys; import physinf_ros.nodes.'
                           'prompt_client; print([m for m in ("torch", "physinf_ros.engine") '
                           'if m in sys.modules])'], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == '[]', done.stdout


def test_benchmark_node_says_stopped_while_ros_still_runs(tmp_path):
    command = installed_command('benchmark_node')
    # Short cells, many of them: the run is still going when the interrupt comes.
    proc = subprocess.Popen(command + ['--ros-args', '-r', f'__ns:={NAMESPACE}', '-p',
                                       'device:=cpu', '-p', 'contexts:=64', '-p',
                                       'sessions:=1000', '-p', f'out_dir:={tmp_path}'],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = signal_after(proc, 'loaded', signal.SIGINT)
    assert proc.returncode == 0, output
    # Its last words go out while its context is valid (rclpy's own handler shut it first).
    assert ': stopped' in output and 'context is invalid' not in output, output
