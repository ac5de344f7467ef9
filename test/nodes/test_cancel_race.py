"""
A cancel that races a request's last step: one outcome, told once, whichever wins.

The race is made exact here: decoder_node's worker code runs in this process against a stand-in
engine that lets the cancel land at a chosen moment of the last step, with no rclpy node (the
node tests cannot time a cancel to a step on a shared CPU).
"""

import logging
import threading

from physinf_ros.engine import Sampling
from physinf_ros.measurement.stats import LatencyWindow, PrefixReuse, TokenIntervals
from physinf_ros.nodes.decoder_node import CANCELLED_BY_CLIENT, DecoderNode
from physinf_ros.serving.request_queue import Ledger, Request
import pytest


class Piece:

    def __init__(self, text):
        self.text, self.step_ms = text, 1.0


class Generation:
    """Two pieces, then eos, as the engine's loop ends; the cancel lands when `at` says."""

    def __init__(self, request, at, cancelled):
        self.request, self.at, self.cancelled = request, at, cancelled
        self.text, self.token_ids, self.step_ms = '', [], []
        self.finish_reason, self.detail = None, ''
        self.ttft_ms, self.tokens_per_s, self.cached_tokens = 1.0, 100.0, 0
        # No speculation: one token per step, nothing drafted.
        self.proposer, self.tokens_per_step = None, 1.0
        self.verify_steps = self.drafted_tokens = self.accepted_tokens = 0

    def __iter__(self):
        for text in ('Hello', '!'):
            self.text += text
            self.token_ids.append(len(self.token_ids))
            self.step_ms.append(1.0)
            yield Piece(text)
            if self.at == 'before the last check':
                self.request.cancel(CANCELLED_BY_CLIENT)
                self.at = None
            if self.cancelled():
                self.finish_reason = 'cancelled'
                return
        self.finish_reason = 'eos'   # the end of sequence token came: the loop has ended
        if self.at == 'after the last step':
            self.request.cancel(CANCELLED_BY_CLIENT)


class Reply:

    def __init__(self):
        self.outcome = None

    def piece(self, text, tokens, step_ms):
        pass

    def end(self, outcome, text):
        assert self.outcome is None, 'a second outcome'
        self.outcome = dict(outcome, text=text)


def worker_of(generation_at):
    """Make a DecoderNode's worker half, with no ROS: what _decode and _end need."""
    node = DecoderNode.__new__(DecoderNode)

    def generate(ids, max_new_tokens, sampling, cancelled, constraint=None, proposer=None):
        return Generation(node.request, generation_at, cancelled)
    node.engine = type('Engine', (), {'generate': staticmethod(generate),
                                      'decoder': type('Decoder', (), {})()})()
    node._settings = {'kv_keep_sequences': 1}
    node._proposer = None
    node._reuse = PrefixReuse()
    node._intervals, node._latency, node._ledger = TokenIntervals(), LatencyWindow(), Ledger()
    node._latency_pub, node._publish = None, lambda publisher, msg: None
    node.events = []
    node._event = lambda event, request_id, reason, goal_id=None, **extra: node.events.append(
        dict(extra, event=event, reason=reason))
    node.get_logger = lambda: logging.getLogger('decoder')
    node.request = Request(1, [1, 2], 8, Sampling(), goal_id='g', reply=Reply())
    return node


@pytest.mark.parametrize('at', ['before the last check', 'after the last step',
                                'after the outcome'])
def test_a_cancel_racing_the_last_step_ends_with_one_consistent_story(at):
    node = worker_of(at)
    request = node.request
    if at == 'after the outcome':
        # It lands as the outcome goes out: refused (the caller hears there is nothing to do).
        refused = []
        end = request.reply.end
        request.reply.end = lambda outcome, text: (
            refused.append(not request.cancel(CANCELLED_BY_CLIENT)), end(outcome, text))
    DecoderNode._decode(node, request)
    outcome = request.reply.outcome
    if at == 'after the outcome':   # the reply was complete: eos, with no word of a cancel
        assert refused == [True] and not request.cancelled
        assert outcome['reason'] == 'eos' and 'cancel' not in outcome['detail']
    else:   # an accepted cancel: cancelled, and says by whom, even with the reply whole
        assert outcome['reason'] == 'cancelled'
        assert outcome['detail'] == CANCELLED_BY_CLIENT
    assert outcome['text'] == ('Hello' if at == 'before the last check' else 'Hello!')
    assert [e['event'] for e in node.events] == ['started', 'finished']
    assert node._ledger.snapshot()['cancelled'] == (1 if outcome['reason'] == 'cancelled'
                                                    else 0)


def test_a_request_ends_once_when_the_worker_and_the_stopping_node_both_end_it():
    node = worker_of(None)
    request = node.request
    ends = [threading.Thread(target=DecoderNode._end, args=(node, request, '', 'finished',
                                                            'cancelled'), kwargs={'detail': d})
            for d in ('node shutting down', 'cancelled by a ~/cancel call')]
    for thread in ends:
        thread.start()
    for thread in ends:
        thread.join()
    assert [e['event'] for e in node.events] == ['finished']   # Reply.end asserts one outcome
    assert node._ledger.snapshot()['finished'] == 1
