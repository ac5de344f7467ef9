"""Speculative decoding on the CPU: settings, proposers, the acceptance rules, lossless replies."""

import math

from known_prompts import ROBOT_PROMPTS
from physinf_ros.engine.base import EngineError, Sampling
from physinf_ros.engine.kernels import ops_torch
from physinf_ros.engine.kernels.rows import RowOps
from physinf_ros.engine.loading import load, make_proposer
from physinf_ros.engine.model import families
from physinf_ros.engine.model.llama import KVCache
from physinf_ros.engine.sampling import probabilities
from physinf_ros.engine.speculative import (accept_greedy, accept_sampled, PromptLookup,
                                            Speculation)
import pytest
from tiny_models import FAMILY_CASES, save_tiny
import torch


@pytest.mark.parametrize('text, expected', [
    ('off', Speculation()), ('', Speculation()), ('ngram:4', Speculation('ngram', 4)),
    ('draft:synthetic:llama-3.2-1b:8', Speculation('draft', 8, 'synthetic:llama-3.2-1b')),
    ('draft:embedded:gptq:2', Speculation('draft', 2, 'embedded:gptq')),
])
def test_settings_parse(text, expected):
    assert Speculation.parse(text) == expected
    assert Speculation.parse(str(expected)) == expected


@pytest.mark.parametrize('text', ['ngram', 'ngram:0', 'ngram:9', 'ngram:x', 'draft:4',
                                  'draft::4', 'eagle:4', 'on'])
def test_bad_settings_say_what_to_write(text):
    with pytest.raises(ValueError, match='ngram:K|K must be'):
        Speculation.parse(text)


def test_prompt_lookup_proposes_what_followed_the_latest_match():
    lookup = PromptLookup(3)
    # "7 8" occurred twice; the latest earlier occurrence is followed by 9 4 5.
    assert lookup.propose([7, 8, 1, 2, 7, 8, 9, 4, 5, 3, 7, 8], 3) == [9, 4, 5]
    assert lookup.propose([7, 8, 1, 2, 7, 8, 9, 4, 5, 3, 7, 8], 2) == [9, 4]
    # The longest n-gram wins over a later shorter one.
    assert lookup.propose([1, 2, 3, 10, 5, 3, 11, 1, 2, 3], 1) == [10]
    assert lookup.propose([1, 2, 3, 4], 4) == []
    # A match near the end proposes only what is there.
    assert lookup.propose([5, 6, 5], 4) == [6, 5]


def test_greedy_acceptance_keeps_the_agreeing_prefix_and_the_models_next_token():
    logits = torch.full((4, 10), -1.0)
    for row, best in enumerate([3, 4, 9, 2]):
        logits[row, best] = 1.0
    assert accept_greedy(logits, [3, 4, 5]) == [3, 4, 9]
    assert accept_greedy(logits, [3, 4, 9]) == [3, 4, 9, 2]
    assert accept_greedy(logits, [0, 4, 9]) == [3]


def _chi_square_ok(counts, probs, trials):
    # Pearson's statistic against the expected counts, over tokens expected at least 5 times;
    # accepted below the 0.999 quantile (Wilson-Hilferty) of its degrees of freedom.
    expected = probs * trials
    cells = expected >= 5
    stat = float((((counts - expected) ** 2) / expected)[cells].sum())
    dof = int(cells.sum()) - 1
    z = 3.09
    bound = dof * (1 - 2 / (9 * dof) + z * math.sqrt(2 / (9 * dof))) ** 3
    return stat < bound, stat, bound


@pytest.mark.parametrize('temperature, top_p', [(1.0, 1.0), (0.7, 0.9)])
def test_speculative_sampling_follows_the_models_distribution(temperature, top_p):
    # Tokens kept from a deterministic draft are distributed as one-at-a-time samples: the
    # first as p0, the second (given the first drafted token was kept) as p1.
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 8, generator=gen) * 1.5
    sampling = Sampling(temperature=temperature, top_p=top_p)
    p = probabilities(logits, temperature, top_p)
    draft = [int(torch.argsort(p[0])[-2]), int(torch.argmax(p[1]))]   # a likely, a top token
    trials = 4000
    first, second = torch.zeros(8), torch.zeros(8)
    for _ in range(trials):
        kept = accept_sampled(logits, draft, sampling, gen)
        first[kept[0]] += 1
        if kept[0] == draft[0]:
            assert len(kept) >= 2
            second[kept[1]] += 1
        else:
            assert len(kept) == 1
    ok, stat, bound = _chi_square_ok(first, p[0], trials)
    assert ok, (stat, bound)
    ok, stat, bound = _chi_square_ok(second, p[1], int(second.sum()))
    assert ok, (stat, bound)
    # top-p's cut tokens never appear.
    assert not first[p[0] == 0].any() and not second[p[1] == 0].any()


@pytest.mark.parametrize('name', sorted(FAMILY_CASES) + ['llama'])
def test_a_verify_step_gives_the_logits_of_one_step_at_a_time(tmp_path, name):
    # Every family's decode step over k + 1 rows (RowOps) against k + 1 single steps, float32.
    arch, tie, sizes = FAMILY_CASES.get(name, ('llama-3.1-8b', False, {}))
    engine = load(str(save_tiny(arch, tmp_path, tie=tie, sizes=sizes)), backend='eager',
                  device='cpu', dtype='float32', max_context=64)
    w, config = engine.decoder.weights, engine.decoder.weights.config
    family = families.module(config)
    cos, sin = family.rope_tables(config, 64, torch.device('cpu'))
    tokens = torch.tensor([5, 17, 3, 250, 9, 41])
    stepped = KVCache.allocate(config, 64, torch.device('cpu'), torch.float32)
    one_at_a_time = []
    for pos, token in enumerate(tokens):
        x = family.decode_layers(w, stepped, token.view(1), torch.tensor([pos], dtype=torch.int32),
                                 cos, sin, ops_torch)
        one_at_a_time.append(ops_torch.rms_matvec(x, w.norm, w.lm_head, None,
                                                  config.rms_norm_eps))
    verified = KVCache.allocate(config, 64, torch.device('cpu'), torch.float32)
    rows = RowOps(ops_torch)
    x = family.decode_layers(w, verified, tokens[:2], torch.tensor([0, 1], dtype=torch.int32),
                             cos, sin, rows)
    x = family.decode_layers(w, verified, tokens[2:], torch.arange(2, 6, dtype=torch.int32),
                             cos, sin, rows)
    logits = rows.rms_matvec(x, w.norm, w.lm_head, None, config.rms_norm_eps)
    # A matrix product sums in another order than the step's vector product: float32 rounding,
    # which grows with depth (up to 1.8e-5 in the 4-layer smollm3's last keys).
    torch.testing.assert_close(logits, torch.stack(one_at_a_time[2:]), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(verified.k[:, :, :6], stepped.k[:, :, :6], rtol=1e-4, atol=1e-4)


@pytest.fixture(scope='module')
def embedded():
    return load('embedded', backend='eager', device='cpu', dtype='float32', max_context=1024)


def _reply(engine, prompt_ids, proposer=None, max_new_tokens=64, sampling=Sampling()):
    engine.decoder.reuse_prefix = False
    generation = engine.generate(prompt_ids, max_new_tokens, sampling, proposer=proposer)
    pieces = list(generation)
    assert ''.join(p.text for p in pieces) == generation.text
    return generation


@pytest.mark.parametrize('prompt', ROBOT_PROMPTS)
def test_greedy_speculation_gives_the_reply_of_plain_decoding(embedded, prompt):
    ids = embedded.encode(prompt)
    plain = _reply(embedded, ids)
    for k in (1, 4, 8):
        fast = _reply(embedded, ids, PromptLookup(k))
        assert fast.token_ids == plain.token_ids, k
        assert fast.finish_reason == plain.finish_reason
        assert len(fast.step_ms) == len(plain.step_ms)
        assert fast.accepted_tokens <= fast.drafted_tokens <= k * fast.verify_steps
    # These replies copy from their prompts: some drafted tokens are kept.
    assert fast.accepted_tokens > 0 and fast.tokens_per_step > 1.0


def test_a_draft_model_of_the_same_weights_is_kept_whole(embedded):
    proposer = make_proposer(Speculation.parse('draft:embedded:4'), embedded)
    try:
        ids = embedded.encode(ROBOT_PROMPTS[1])
        plain = _reply(embedded, ids)
        drafted = _reply(embedded, ids, proposer)
        assert drafted.token_ids == plain.token_ids
        # The draft is the model itself: it proposes what the model chooses.
        assert drafted.accepted_tokens == drafted.drafted_tokens > 0
        assert drafted.tokens_per_step > 3.0
    finally:
        proposer.close()


def test_a_speculative_reply_stops_at_max_new_tokens_exactly(embedded):
    ids = embedded.encode(ROBOT_PROMPTS[0])
    for limit in (1, 2, 5, 9):
        generation = _reply(embedded, ids, PromptLookup(8), max_new_tokens=limit)
        plain = _reply(embedded, ids, max_new_tokens=limit)
        assert generation.token_ids == plain.token_ids
        assert len(generation.token_ids) <= limit
        assert generation.finish_reason == plain.finish_reason


def test_a_speculative_reply_at_the_end_of_the_context(embedded):
    ids = embedded.encode(ROBOT_PROMPTS[0])
    engine = load('embedded', backend='eager', device='cpu', dtype='float32',
                  max_context=len(ids) + 6)
    plain = _reply(engine, ids)
    fast = _reply(engine, ids, PromptLookup(8))
    assert fast.token_ids == plain.token_ids
    assert fast.finish_reason == plain.finish_reason == 'length'


def test_a_cancel_ends_a_speculative_reply_between_two_tokens(embedded):
    ids = embedded.encode(ROBOT_PROMPTS[0])
    seen = []
    embedded.decoder.reuse_prefix = False
    generation = embedded.generate(ids, 64, cancelled=lambda: len(seen) >= 3,
                                   proposer=PromptLookup(8))
    for piece in generation:
        seen.append(piece)
    assert generation.finish_reason == 'cancelled'
    assert len(generation.token_ids) == 3


def test_the_cache_after_a_speculative_reply_is_reused_exactly(embedded):
    # The held sequence after verify steps and rewinds is what the cache holds: a follow-up
    # that shares it prefills only its new tokens and answers as a cold prefill does.
    ids = embedded.encode(ROBOT_PROMPTS[2])
    first = _reply(embedded, ids, PromptLookup(4), max_new_tokens=24)
    follow_up = ids + first.token_ids + embedded.encode('Now say it again.')[1:]
    embedded.decoder.reuse_prefix = True
    warm = embedded.generate(follow_up, 16)
    list(warm)
    assert warm.cached_tokens >= len(ids) + len(first.token_ids) - 1
    cold = _reply(embedded, follow_up, max_new_tokens=16)
    assert warm.token_ids == cold.token_ids


def test_speculative_sampling_with_a_seed_repeats(embedded):
    ids = embedded.encode(ROBOT_PROMPTS[1])
    sampling = Sampling(temperature=0.8, top_p=0.95, seed=7)
    one = _reply(embedded, ids, PromptLookup(4), sampling=sampling)
    two = _reply(embedded, ids, PromptLookup(4), sampling=sampling)
    assert one.token_ids == two.token_ids and one.verify_steps > 0


def test_a_constrained_reply_does_not_speculate(embedded):
    from physinf_ros.structured import OutputFormat
    ids = embedded.encode('Where should the robot go? Answer in JSON.')
    generation = embedded.generate(ids, 32, proposer=PromptLookup(4),
                                   output=OutputFormat(response_format='{"type": "object"}'))
    list(generation)
    assert generation.proposer is None and generation.verify_steps == 0


def test_backends_that_cannot_verify_refuse_a_proposer():
    engine = load('embedded', backend='hf', device='cpu', dtype='float32', max_context=256)
    with pytest.raises(EngineError, match='eager or graphed'):
        engine.generate(engine.encode('hi'), 4, proposer=PromptLookup(4))


def test_a_draft_model_of_another_vocabulary_is_refused(embedded, tmp_path):
    folder = save_tiny('llama-3.1-8b', tmp_path)   # 512 tokens, not 49152
    with pytest.raises(EngineError, match='vocabulary'):
        make_proposer(Speculation.parse(f'draft:{folder}:4'), embedded)


def test_verify_refuses_drafts_it_cannot_take(embedded):
    embedded.decoder.prefill(embedded.encode('hi'), Sampling())
    with pytest.raises(EngineError, match='1 to 8'):
        embedded.decoder.verify(list(range(9)))
    with pytest.raises(EngineError, match='cannot rewind'):
        embedded.decoder.rewind(embedded.decoder.position + 1, 5)
