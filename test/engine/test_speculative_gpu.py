"""
Speculative decoding on the GPU, graphed (skipped where there is no GPU).

A verify step computes its rows with other arithmetic than the one-token step (a matrix product
over k + 1 rows against the step's GEMV), so in bf16 its logits are held to the engine's usual
bar: no further from transformers' float32 than transformers' own bf16 forward (test_gpu_engine's
criterion). Greedy replies equal the plain graphed replies, or part at a near-tie (the top-2 gap
of the plain step's logits below bf16 resolution there).
"""

import statistics

from decode_checks import bf16_ulp, rel
from known_prompts import ROBOT_PROMPTS
from physinf_ros.engine import load, Sampling
from physinf_ros.engine.loading import make_proposer
from physinf_ros.engine.speculative import PromptLookup, Speculation
import pytest
import torch

pytestmark = pytest.mark.gpu


@pytest.fixture(scope='module')
def engines():
    return {name: load(model, backend=backend, device='cuda', dtype=dtype, max_context=1024)
            for name, model, backend, dtype in (
                ('f32', 'embedded', 'hf', 'float32'), ('hf', 'embedded', 'hf', 'bfloat16'),
                ('ours', 'embedded', 'graphed', 'bfloat16'))}


@pytest.mark.parametrize('k', [1, 4, 8])
def test_verify_rows_are_as_close_to_float32_as_transformers_bf16(engines, k):
    prompt = engines['ours'].encode(ROBOT_PROMPTS[0])
    f32, bf16, ours = (engines[name].decoder for name in ('f32', 'hf', 'ours'))
    # The float32 greedy continuation, and each forward's logits teacher-forced on it:
    # reference[i] and theirs[i] follow its first i tokens.
    tokens = [f32.prefill(prompt, Sampling())]
    bf16.prefill(prompt, Sampling())
    reference, theirs = [], []
    for _ in range(k + 1):
        bf16.step(tokens[-1])
        theirs.append(bf16.last_logits().float())
        tokens.append(f32.step(tokens[-1]))
        reference.append(f32.last_logits().float())
    ours.prefill(prompt, Sampling())
    ours.rewind(len(prompt), tokens[0])   # pending: the float32 first token, whatever ours chose
    rows = ours.verify(tokens[1:k + 1]).float()
    ours_errors = [rel(rows[i], reference[i]) for i in range(k + 1)]
    hf_errors = [rel(theirs[i], reference[i]) for i in range(k + 1)]
    print(f'k={k}: verify rows rel. error vs hf float32 {[round(e, 5) for e in ours_errors]}, '
          f'hf bf16 {[round(e, 5) for e in hf_errors]}')
    assert statistics.median(ours_errors) <= 1.5 * statistics.median(hf_errors) + 1e-3
    assert max(ours_errors) <= 1.5 * max(hf_errors) + 1e-3


def _reply(engine, ids, proposer=None, max_new_tokens=64):
    engine.decoder.reuse_prefix = False
    generation = engine.generate(ids, max_new_tokens, Sampling(), proposer=proposer)
    list(generation)
    return generation


def _lossless_or_near_tie(engine, ids, plain, fast, label):
    same = 0
    while same < min(len(plain.token_ids), len(fast.token_ids)) and \
            plain.token_ids[same] == fast.token_ids[same]:
        same += 1
    if fast.token_ids == plain.token_ids:
        return
    # Where they part, the plain step's own logits must hold a near-tie.
    engine.decoder.reuse_prefix = False
    logits = engine.decoder.prompt_logits(ids + plain.token_ids[:same])[-1].float()
    top2 = torch.topk(logits, 2).values.tolist()
    print(f'{label}: parted at token {same}, top-2 gap {top2[0] - top2[1]:.4f}, '
          f'bf16 ulp {bf16_ulp(top2[0]):.4f}')
    assert top2[0] - top2[1] <= 2 * bf16_ulp(top2[0]), label


@pytest.mark.parametrize('model', ['embedded', 'embedded:gptq'])
def test_greedy_speculation_gives_the_plain_graphed_reply(model):
    engine = load(model, backend='graphed', device='cuda', dtype='bfloat16', max_context=1024)
    assert engine.info.backend == 'graphed'
    kept = drafted = 0
    for prompt in ROBOT_PROMPTS:
        ids = engine.encode(prompt)
        plain = _reply(engine, ids)
        for k in (2, 4, 8):
            fast = _reply(engine, ids, PromptLookup(k))
            _lossless_or_near_tie(engine, ids, plain, fast, f'{model} k={k} {prompt[:30]!r}')
            kept, drafted = kept + fast.accepted_tokens, drafted + fast.drafted_tokens
    print(f'{model}: prompt lookup kept {kept} of {drafted} drafted tokens')
    assert kept > 0


def test_a_graphed_draft_model_of_the_same_weights_is_kept(engines):
    engine = engines['ours']
    proposer = make_proposer(Speculation.parse('draft:embedded:4'), engine)
    try:
        ids = engine.encode(ROBOT_PROMPTS[1])
        plain = _reply(engine, ids)
        fast = _reply(engine, ids, proposer)
        _lossless_or_near_tie(engine, ids, plain, fast, 'draft:embedded:4')
        print(f'draft:embedded:4 kept {fast.accepted_tokens} of {fast.drafted_tokens}, '
              f'{fast.tokens_per_step:.2f} tokens per step')
        assert fast.accepted_tokens >= 0.9 * fast.drafted_tokens
    finally:
        proposer.close()
