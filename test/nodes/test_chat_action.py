"""Conversations through ~/generate: messages, KV reuse and refusals; real rclpy, own process."""

import os
import re
import subprocess
import sys
import threading

from installed import require_interfaces
import pytest

require_interfaces()

from physinf_ros_interfaces.action import Generate  # noqa: E402, I100 - after the skip
from physinf_ros_interfaces.msg import ChatMessage  # noqa: E402
from rclpy.action import ActionClient  # noqa: E402
from ros_harness import Probe, serving_decoder, TEST_DEVICE  # noqa: E402

NAMESPACE = f'/chat{os.getpid()}'
SYSTEM = 'You are a kitchen robot. You fetch cups, plates and cutlery, and you answer briefly.'


class ChatProbe(Probe):
    """The probe plus two Generate clients, as two robots' programs would be."""

    def __init__(self, namespace):
        super().__init__(namespace)
        self.generate_clients = [ActionClient(self, Generate, f'{self.base}/generate')
                                 for _ in range(2)]


@pytest.fixture(scope='module')
def harness(tmp_path_factory):
    log = tmp_path_factory.mktemp('chat') / 'decoder.log'
    gen = serving_decoder(NAMESPACE, log, device=TEST_DEVICE, max_new_tokens=12,
                          max_context=1024, probe_class=ChatProbe)
    harness = next(gen)
    for client in harness.probe.generate_clients:
        assert client.wait_for_server(timeout_sec=30)
    yield harness
    gen.close()


def messages(*turns):
    """Return ChatMessage messages made of (role, content) pairs."""
    return [ChatMessage(role=role, content=content) for role, content in turns]


def send(harness, turns, client=0, cancel_after_piece=False):
    """Send a conversation as a goal; return its result (cancelled after its first piece)."""
    got_piece = threading.Event()
    future = harness.probe.generate_clients[client].send_goal_async(
        Generate.Goal(messages=messages(*turns)),
        feedback_callback=lambda _: got_piece.set())
    handle = harness.wait_for(lambda: future.done() and future.result(), 30, 'the goal response')
    if cancel_after_piece:
        assert got_piece.wait(60), 'no feedback piece'
        cancel = handle.cancel_goal_async()
        harness.wait_for(cancel.done, 10, 'the cancel answer')
    result = handle.get_result_async()
    return harness.wait_for(lambda: result.done() and result.result(), 120,
                            'the goal result').result


def cold(harness, turns, client=0):
    """Return the same conversation's result with reuse off (prefilled from position 0)."""
    with harness.parameters(kv_keep_sequences=0):
        result = send(harness, turns, client)
    assert result.cached_tokens == 0
    return result


def test_a_three_turn_conversation_reuses_each_turn_and_answers_as_cold(harness):
    turns = [('system', SYSTEM), ('user', 'Where do the cups go?')]
    previous = None
    for number, question in enumerate(['Where do the cups go?', 'And the plates?',
                                       'Thanks. Anything else?']):
        if number:
            turns += [('assistant', previous.text), ('user', question)]
        result = send(harness, turns)
        assert result.finish_reason in ('eos', 'length') and result.text
        if number:
            # The whole previous prompt is still in the cache, and the reply's tokens as fed.
            assert result.cached_tokens >= previous.prompt_tokens, (number, result)
            assert result.prompt_tokens > previous.prompt_tokens + previous.tokens
            assert result.text == cold(harness, turns).text
            send(harness, turns)   # the cold run left its own copy; the next turn follows it
        previous = result


def test_an_unrelated_request_reuses_the_shared_system_prompt(harness):
    first = send(harness, [('system', SYSTEM), ('user', 'Where do the cups go?')])
    other_turns = [('system', SYSTEM), ('user', 'What is two plus two?')]
    other = send(harness, other_turns)
    # The system turn and the template's opening of the user turn, not the user's text.
    system_words = len(SYSTEM.split())
    assert system_words <= other.cached_tokens < min(first.prompt_tokens, other.prompt_tokens)
    assert other.text == cold(harness, other_turns).text


def test_a_cancelled_turn_and_its_retry(harness):
    turns = [('system', SYSTEM), ('user', 'Describe every drawer of the kitchen in detail.')]
    cancelled = send(harness, turns, cancel_after_piece=True)
    assert cancelled.finish_reason == 'cancelled'
    retry = send(harness, turns)
    assert retry.finish_reason in ('eos', 'length')
    assert retry.cached_tokens == retry.prompt_tokens - 1   # all but the token that is run
    assert retry.text == cold(harness, turns).text


def test_two_clients_interleave_their_conversations(harness):
    a_turns = [('system', SYSTEM), ('user', 'Where do the cups go?')]
    b_turns = [('user', 'Name a colour.')]
    a1, b1 = send(harness, a_turns, 0), send(harness, b_turns, 1)
    a_turns += [('assistant', a1.text), ('user', 'And the plates?')]
    b_turns += [('assistant', b1.text), ('user', 'Another one.')]
    a2 = send(harness, a_turns, 0)     # the cache holds b's conversation: little in common
    assert a2.cached_tokens < a1.prompt_tokens
    b2 = send(harness, b_turns, 1)
    assert b2.cached_tokens < b1.prompt_tokens
    assert (a2.text, b2.text) == (cold(harness, a_turns, 0).text, cold(harness, b_turns, 1).text)


@pytest.mark.parametrize('turns, says', [
    ([], 'empty prompt'),
    ([('user', 'hi'), ('robot', 'beep')], 'no known role'),
    ([('user', 'hi'), ('system', 'Be brief.'), ('user', 'hi')], 'only be the first'),
    ([('user', 'hi'), ('assistant', 'Hello.')], 'ends with a user or tool message'),
    ([('user', '\u200b ')], 'message 0'),
    ([('user', 'bad \ufffd text')], 'not valid text'),
    ([('user', 'word ' * 2000)], 'no room for a reply'),
])
def test_a_bad_conversation_is_rejected_with_its_reason(harness, turns, says):
    result = send(harness, turns) if turns else _send_empty(harness)
    assert result.finish_reason == 'rejected' and says in result.detail, result.detail


def _send_empty(harness):
    # No messages and no prompt: the prompt path refuses it as an empty prompt.
    future = harness.probe.generate_clients[0].send_goal_async(Generate.Goal())
    handle = harness.wait_for(lambda: future.done() and future.result(), 30, 'the response')
    result = handle.get_result_async()
    return harness.wait_for(lambda: result.done() and result.result(), 30, 'the result').result


def test_events_and_diagnostics_carry_the_reuse(harness):
    mark = harness.probe.mark()
    turns = [('system', SYSTEM), ('user', 'Where do the cups go?')]
    send(harness, turns)
    again = send(harness, turns)
    finished = [e for e in harness.probe.since(mark, 'events') if e['event'] == 'finished']
    assert finished[-1]['cached_tokens'] == again.cached_tokens == again.prompt_tokens - 1
    assert finished[-1]['prompt_tokens'] == again.prompt_tokens
    diagnostics = harness.wait_for(
        lambda: [d for d in harness.probe.since(mark, 'diagnostics')
                 if d.get('last_cached_tokens') == str(again.cached_tokens)], 5, 'diagnostics')
    assert 0.0 < float(diagnostics[-1]['kv_cache_hit_rate']) < 1.0


def test_prompt_client_chat_keeps_the_history_and_prints_the_reuse(harness):
    lines = 'Where do the cups go?\n\nAnd the plates?\n'
    done = subprocess.run(
        [sys.executable, '-m', 'physinf_ros.nodes.prompt_client', '--chat', '--system', SYSTEM,
         '--decoder', harness.probe.base, '--timeout', '120'],
        input=lines, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    turns = re.findall(r'\[(eos|length): (\d+) tokens, TTFT ([\d.]+) ms, (\d+) of (\d+) prompt '
                       r'tokens cached\]', done.stdout)
    assert len(turns) == 2, done.stdout   # the blank line is no turn
    (_, _, _, _, first_prompt), (_, _, _, cached, second_prompt) = turns
    # The second turn's prompt holds the first and its reply, and the cache kept the first.
    assert int(first_prompt) <= int(cached) < int(second_prompt)
