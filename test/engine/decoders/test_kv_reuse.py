"""KV reuse on the CPU: a prefill that keeps a cached prefix answers exactly as a cold one."""

from physinf_ros.engine import load, Sampling
from physinf_ros.engine.base import reusable_prefix
from physinf_ros.engine.decoders.native import PREFILL_ROWS
from physinf_ros.engine.generate import FINISH_CANCELLED, FINISH_EOS
import pytest

SYSTEM = 'You are a kitchen robot. You fetch cups, plates and cutlery, and you answer briefly.'


@pytest.fixture(scope='module', params=['eager', 'eager-rows', 'hf'])
def engine(request):
    # eager-rows: prompts of up to 128 new tokens prefilled over rows, as graphed CUDA does.
    engine = load('embedded', backend=request.param.split('-')[0], device='cpu',
                  dtype='float32', max_context=1024)
    if request.param == 'eager-rows':
        engine.decoder.prefill_rows = PREFILL_ROWS
    return engine


def reply(engine, prompt_ids, reuse=True, max_new_tokens=12, cancel_after=None):
    """Decode greedily; return the Generation (cancelled after cancel_after tokens if given)."""
    engine.decoder.reuse_prefix = reuse
    generation = engine.generate(prompt_ids, max_new_tokens, Sampling(),
                                 cancelled=lambda: cancel_after is not None
                                 and len(generation.token_ids) >= cancel_after)
    for _ in generation:
        pass
    return generation


def fed(generation):
    """Return the reply tokens a step was fed: all but the last, unless an end of sequence."""
    return len(generation.token_ids) - (generation.finish_reason != FINISH_EOS)


def cold(engine, prompt_ids, **kwargs):
    """Decode from position 0, the cache first filled with an unrelated sequence."""
    reply(engine, engine.encode('Unrelated: count to three.'), reuse=False, max_new_tokens=2)
    return reply(engine, prompt_ids, reuse=False, **kwargs)


def test_reusable_prefix_keeps_the_common_prefix_less_the_last_prompt_token():
    assert reusable_prefix([1, 2, 3, 4], [1, 2, 9]) == 2
    assert reusable_prefix([1, 2, 3, 4], [1, 2, 3]) == 2      # the last token is always run
    assert reusable_prefix([1, 2], [1, 2, 3, 4]) == 2
    assert reusable_prefix([], [1, 2]) == 0
    assert reusable_prefix([5], [1, 2]) == 0


def test_a_follow_up_turn_reuses_the_conversation_and_answers_as_cold(engine):
    first = engine.encode('Where do the cups go?', system_prompt=SYSTEM)
    turn = reply(engine, first)
    # What the cache holds: the prompt and every reply token fed to a step (all but the last).
    follow_up = first + turn.token_ids + engine.encode('And the plates?', use_chat_template=False)
    reused = reply(engine, follow_up)
    assert reused.cached_tokens == len(first) + fed(turn)
    again = cold(engine, follow_up)
    assert again.cached_tokens == 0
    assert reused.token_ids == again.token_ids
    assert len(set(reused.token_ids)) > 3, 'a degenerate reply would make this comparison weak'
    # Third turn: the second reply's tokens are reused as well.
    third = follow_up + reused.token_ids + engine.encode(' Thanks.', use_chat_template=False)
    assert reply(engine, third).cached_tokens == len(follow_up) + fed(reused)
    assert reply(engine, third).token_ids == cold(engine, third).token_ids


def test_an_unrelated_request_reuses_the_shared_system_prompt(engine):
    first = engine.encode('Where do the cups go?', system_prompt=SYSTEM)
    other = engine.encode('What is two plus two?', system_prompt=SYSTEM)
    shared = reusable_prefix(first, other)
    assert shared >= engine.system_tokens(SYSTEM)
    reply(engine, first, max_new_tokens=4)
    reused = reply(engine, other)
    assert reused.cached_tokens == shared
    assert reused.token_ids == cold(engine, other).token_ids


def test_the_same_prompt_again_runs_only_its_last_token(engine):
    prompt = engine.encode('Name a fruit.', system_prompt=SYSTEM)
    first = reply(engine, prompt)
    again = reply(engine, prompt)
    assert again.cached_tokens == len(prompt) - 1
    assert again.token_ids == first.token_ids


def test_a_cancelled_turn_and_its_retry(engine):
    prompt = engine.encode('Describe the kitchen in detail.', system_prompt=SYSTEM)
    cancelled = reply(engine, prompt, max_new_tokens=40, cancel_after=5)
    assert cancelled.finish_reason == FINISH_CANCELLED and len(cancelled.token_ids) == 5
    retry = reply(engine, prompt)
    assert retry.cached_tokens == len(prompt) - 1
    assert retry.token_ids == cold(engine, prompt).token_ids
    # A follow-up to the cancelled part reuses only what its steps fed.
    follow_up = prompt + cancelled.token_ids + engine.encode('Go on.', use_chat_template=False)
    reply(engine, prompt, max_new_tokens=40, cancel_after=5)
    resumed = reply(engine, follow_up)
    assert resumed.cached_tokens == len(prompt) + len(cancelled.token_ids) - 1
    assert resumed.token_ids == cold(engine, follow_up).token_ids


def test_reuse_off_prefills_from_position_zero(engine):
    prompt = engine.encode('Name a fruit.', system_prompt=SYSTEM)
    reply(engine, prompt)
    assert reply(engine, prompt, reuse=False).cached_tokens == 0


def test_a_failed_prefill_leaves_only_the_kept_prefix_reusable(monkeypatch):
    engine = load('embedded', backend='eager', device='cpu', dtype='float32', max_context=512)
    decoder = engine.decoder
    prompt = engine.encode('Where do the cups go?', system_prompt=SYSTEM)
    other = engine.encode('What is two plus two?', system_prompt=SYSTEM)
    shared = reusable_prefix(prompt, other)
    reply(engine, prompt, max_new_tokens=8)
    original = decoder.family.prompt_logits

    def corrupting(weights, cache, ids, cos, sin, last_only=False, start=0, ops=None):
        # Writes garbage where the new tokens go, as a forward that failed half-way might.
        cache.k[:, :, start:start + len(ids)] = 1e3
        raise RuntimeError('the forward failed')
    monkeypatch.setattr(decoder.family, 'prompt_logits', corrupting)
    with pytest.raises(RuntimeError):
        decoder.prefill(other, Sampling())
    monkeypatch.setattr(decoder.family, 'prompt_logits', original)
    # The garbage is past the kept prefix: the retry keeps the prefix and recomputes the rest.
    retry = reply(engine, prompt)
    assert retry.cached_tokens == shared
    assert retry.token_ids == cold(engine, prompt).token_ids
