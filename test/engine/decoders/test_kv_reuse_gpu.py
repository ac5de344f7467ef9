"""
KV reuse in the graphed engine on a GPU (skipped where there is no GPU).

After a reused prefill, teacher-forced bf16 logits are within the engine's usual tolerance of
transformers' float32 ones (test_gpu_engine.check_logits': no further than transformers' own
bf16 forward, 1.5x, at the median and the worst step), as the cold prefill's are: a wrong kept
prefix (a discarded step's key and value, an offset position) would put them far off. The
reply is decoded with the overlapped loop, which launches steps ahead and discards them at the
end.
"""

from statistics import median

from physinf_ros.engine import load, Sampling
from physinf_ros.engine.generate import FINISH_EOS

import pytest
import torch

pytestmark = pytest.mark.gpu

SYSTEM = 'You are a kitchen robot. You fetch cups, plates and cutlery, and you answer briefly.'
STEPS = 16


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


@pytest.fixture(scope='module')
def engines():
    return {'f32': load('embedded', backend='hf', device='cuda', dtype='float32',
                        max_context=1024),
            'hf': load('embedded', backend='hf', device='cuda', dtype='bfloat16',
                       max_context=1024),
            'ours': load('embedded', backend='graphed', device='cuda', dtype='bfloat16',
                         max_context=1024)}


def decode(engine, prompt_ids, cancel_after=None, max_new_tokens=32):
    generation = engine.generate(prompt_ids, max_new_tokens, Sampling(),
                                 cancelled=lambda: cancel_after is not None
                                 and len(generation.token_ids) >= cancel_after)
    for _ in generation:
        pass
    return generation


def forced_errors(engines, prompt_ids, reuse):
    """
    Return per-step logit errors against float32, forced: ours (reusing or not), hf bf16.

    Also the tokens ours kept from its cache.
    """
    reference, ours, hf = (engines[name].decoder for name in ('f32', 'ours', 'hf'))
    reference.reuse_prefix, ours.reuse_prefix, hf.reuse_prefix = False, reuse, False
    tokens = [reference.prefill(prompt_ids, Sampling())]
    ours.prefill(prompt_ids, Sampling())
    hf.prefill(prompt_ids, Sampling())
    cached = ours.cached_tokens
    errors = {'ours': [], 'hf': []}
    for _ in range(STEPS):
        expected = reference.last_logits().float()
        errors['ours'].append(rel(ours.last_logits().float(), expected))
        errors['hf'].append(rel(hf.last_logits().float(), expected))
        tokens.append(reference.step(tokens[-1]))
        ours.step(tokens[-2])
        hf.step(tokens[-2])
    torch.cuda.synchronize()
    return errors, cached


@pytest.mark.parametrize('cancel_after', [None, 5])
def test_a_reused_prefill_is_as_close_to_float32_as_a_cold_one(engines, cancel_after):
    ours = engines['ours']
    assert ours.info.backend == 'graphed'
    prompt = ours.encode('Describe the kitchen in detail.', system_prompt=SYSTEM)
    ours.decoder.reuse_prefix = True
    turn = decode(ours, prompt, cancel_after)
    follow_up = prompt + turn.token_ids + ours.encode('And the plates?', use_chat_template=False)
    reused, cached = forced_errors(engines, follow_up, reuse=True)
    hf = reused['hf']
    # Only what the loop read is kept: the prompt and the reply tokens fed to a step it read
    # (all but the last, unless the last was followed by an end of sequence).
    assert cached == len(prompt) + len(turn.token_ids) - (turn.finish_reason != FINISH_EOS)
    cold, none = forced_errors(engines, follow_up, reuse=False)
    assert none == 0
    reused, cold = reused['ours'], cold['ours']
    print(f'relative logit error vs float32 (median, max): reused {median(reused):.4f}, '
          f'{max(reused):.4f}; cold {median(cold):.4f}, {max(cold):.4f}; hf bf16 '
          f'{median(hf):.4f}, {max(hf):.4f}')
    for errors in (reused, cold):
        assert median(errors) <= 1.5 * median(hf) + 1e-3
        assert max(errors) <= 1.5 * max(hf) + 1e-3
