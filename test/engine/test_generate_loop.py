"""The overlapped generation loop on a scripted decoder: what is launched, read and discarded."""

from types import SimpleNamespace
from typing import List, Optional

from physinf_ros.engine.base import (ContextFull, DeferredStep, LAUNCHED_AHEAD, Sampling,
                                     StepResult)
from physinf_ros.engine.generate import FINISH_CANCELLED, FINISH_EOS, FINISH_LENGTH, Generation
import pytest

EOS = 0


class _Launched:

    def __init__(self, decoder, index):
        self.decoder, self.index = decoder, index

    def wait(self) -> StepResult:
        self.decoder.waited.append(self.index)
        return StepResult(self.decoder.script[self.index], 1.0)


class ScriptedDecoder:
    """Emits script[0] from the prefill and script[n] from the n-th launched step."""

    def __init__(self, script: List[int], max_context: int = 1000, asynchronous: bool = True):
        self.script = script
        self.max_context = max_context
        self.asynchronous = asynchronous
        self.launched = 0                 # steps launched so far
        self.waited: List[int] = []       # indices of the steps read, in order
        self.position = 0
        self.reuse_prefix, self.cached_tokens = True, 0

    def prefill(self, token_ids, sampling, allowed=None) -> int:
        self.position = len(token_ids)
        return self.script[0]

    def step(self, token: Optional[int] = None) -> int:
        return self.launch().wait().token

    def launch(self):
        if self.position + 1 >= self.max_context:
            raise ContextFull(f'context of {self.max_context} tokens is full')
        self.position += 1
        self.launched += 1
        if self.asynchronous:
            return _Launched(self, self.launched)
        index = self.launched
        return DeferredStep(lambda: _Launched(self, index).wait().token)


def run(decoder, max_new_tokens=100, cancel_after=None):
    """Iterate a generation; return it and, per piece, how many steps were launched by then."""
    seen = []
    generation = Generation(decoder, None, frozenset({EOS}), [7, 8, 9], max_new_tokens,
                            Sampling(), cancelled=lambda: cancel_after is not None
                            and len(seen) >= cancel_after)
    for piece in generation:
        seen.append((piece.token_id, decoder.launched))
    return generation, seen


def test_the_next_steps_are_launched_before_a_token_is_handed_out():
    decoder = ScriptedDecoder([5, 6, 7, 8, 9, 10, 11, 12, 13, 14, EOS])
    generation, seen = run(decoder)
    assert generation.token_ids == [5, 6, 7, 8, 9, 10, 11, 12, 13, 14]
    for n, (_, launched) in enumerate(seen[:-1]):
        # Token n is in the caller's hands while steps n+1 and n+2 are queued.
        assert launched == n + LAUNCHED_AHEAD
    assert seen[-1] == (EOS, len(seen))     # eos: nothing more launched
    assert generation.finish_reason == FINISH_EOS


def test_eos_discards_the_step_launched_after_it():
    decoder = ScriptedDecoder([5, 6, EOS, 99, 99, 99])
    generation, _ = run(decoder)
    assert generation.token_ids == [5, 6] and generation.finish_reason == FINISH_EOS
    assert decoder.waited == [1, 2]           # the eos step was read, the next one never
    assert decoder.launched == 3


def test_max_new_tokens_launches_nothing_past_the_end():
    decoder = ScriptedDecoder([5] * 50)
    generation, _ = run(decoder, max_new_tokens=6)
    assert generation.token_ids == [5] * 6 and generation.finish_reason == FINISH_LENGTH
    assert generation.detail == 'max_new_tokens (6) reached'
    assert decoder.launched == 5 and decoder.waited == [1, 2, 3, 4, 5]


def test_a_cancel_between_tokens_ends_the_reply_before_the_next_one():
    decoder = ScriptedDecoder(list(range(1, 60)))
    generation, seen = run(decoder, cancel_after=4)
    assert generation.finish_reason == FINISH_CANCELLED
    assert generation.token_ids == [1, 2, 3, 4]   # no token after the cancel was seen
    assert decoder.launched == 4 + LAUNCHED_AHEAD - 1 and decoder.waited == [1, 2, 3]


@pytest.mark.parametrize('asynchronous', [True, False])
def test_a_full_context_ends_with_length_after_the_last_step_that_fits(asynchronous):
    decoder = ScriptedDecoder(list(range(1, 60)), max_context=10, asynchronous=asynchronous)
    generation, _ = run(decoder)
    assert generation.finish_reason == FINISH_LENGTH
    assert generation.detail == 'context of 10 tokens is full'
    assert 3 + len(generation.token_ids) == 10    # prompt plus reply fill the context


@pytest.mark.parametrize('script', [[5, 6, 7, EOS], [1, 2, 3, 4, 5, 6, 7, 8, 9]])
def test_deferred_steps_give_the_same_reply_and_run_only_when_read(script):
    overlapped, _ = run(ScriptedDecoder(script), max_new_tokens=6)
    plain_decoder = ScriptedDecoder(script, asynchronous=False)
    plain, _ = run(plain_decoder, max_new_tokens=6)
    assert plain.token_ids == overlapped.token_ids
    assert plain.finish_reason == overlapped.finish_reason
    # A deferred step computes when it is read: none is computed and thrown away.
    assert plain_decoder.waited == list(range(1, len(plain_decoder.waited) + 1))
    assert len(plain.step_ms) == len(plain_decoder.waited)


class KeepsEveryDraft:
    """A decoder whose verify steps keep every drafted token, then choose 6."""

    def __init__(self):
        self.info = SimpleNamespace(max_context=1000)
        self.position, self.reuse_prefix, self.cached_tokens = 0, True, 0

    def prefill(self, ids, sampling, allowed=None):
        self.position = len(ids)
        return 5

    def speculate(self, draft):
        self.position += len(draft) + 1
        return list(draft) + [6]

    def step(self, token=None):
        self.position += 1
        return 6


class DraftsUpToEos:
    k = 3

    def start(self, prompt_ids, sampling):
        pass

    def propose(self, sequence, k):
        return [1, 2, EOS][:k]


def test_tokens_per_step_counts_the_tokens_handed_out_per_step():
    # The verify step kept 1, 2, EOS and chose 6: the reply ends at EOS, so 3 tokens came of
    # its one step (6 and what a kept token would have been are never handed out).
    generation = Generation(KeepsEveryDraft(), None, frozenset({EOS}), [7, 8, 9], 100,
                            Sampling(), proposer=DraftsUpToEos())
    assert [p.token_id for p in generation] == [5, 1, 2, EOS]
    assert generation.verify_steps == 1 and len(generation.step_ms) == 3
    assert generation.tokens_per_step == 3.0
