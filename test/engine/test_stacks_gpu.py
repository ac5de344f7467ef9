"""
The transformers backends' software stacks on a GPU (skipped where there is no GPU).

Attention stacks change only how attention is computed: teacher-forced on the float32 greedy
tokens, each must be no further from transformers' float32 forward than its default bf16 forward
(SDPA, torch's own kernel choice) is, with the 1.5x margin test_gpu_engine.py uses. Quantisation
stacks change the weights: their graphed step must give what their own op-by-op forward gives,
and stay near the bf16 model by what 4 or 8 bits allow (bounds below).
"""

import statistics

from physinf_ros.engine import load, Sampling, stacks
import pytest
from tiny_models import save_tiny
import torch

pytestmark = pytest.mark.gpu

# Measured on the H200: transformers 5.17 calls SDPA with enable_gqa for a GQA model, which
# torch's memory-efficient kernel does not take ('No available kernel').
NO_GQA = pytest.mark.xfail(strict=True, raises=RuntimeError,
                           reason="torch's memory-efficient SDPA kernel takes no enable_gqa")
ATTENTION = [pytest.param(a.name, marks=NO_GQA) if a.name == 'sdpa-efficient' else a.name
             for a in stacks.ATTENTIONS if a.package is None]


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def teacher_forced(spec, modes, steps=24, dtype='bfloat16'):
    """Logits of each mode per step, fed the float32 hf forward's greedy tokens."""
    reference = load(spec, 'hf', 'cuda', 'float32', 256)
    prompt = list(range(3, 40))
    tokens = [reference.decoder.prefill(prompt, Sampling())]
    decoders = {}
    for mode in modes:
        decoders[mode] = load(spec, mode, 'cuda', dtype, 256).decoder
        decoders[mode].prefill(prompt, Sampling())
    logits = {mode: [] for mode in ('f32',) + tuple(modes)}
    for _ in range(steps):
        logits['f32'].append(reference.decoder.last_logits().float())
        for mode, decoder in decoders.items():
            logits[mode].append(decoder.last_logits().float())
        forced = tokens[-1]
        tokens.append(reference.decoder.step(forced))
        for decoder in decoders.values():
            decoder.step(forced)
    return logits


def median_error(logits, mode, against):
    return statistics.median(rel(a, b) for a, b in zip(logits[mode], logits[against]))


# Measured on the H200 (transformers 5.17, torch 2.11): hf-graphed's first replayed step equals
# hf's logits exactly, every later one is unrelated to them (relative error 1.2-1.5), while
# capturing the step anew before every replay gives 0.0; an explicit position_ids or 4D mask
# changes nothing. Not yet explained: until it is, hf-graphed's figures time its kernels but
# are not a correct decode, and these tests say so (strict: a fix makes them fail until the
# marker goes).
HF_GRAPHED_STALE = pytest.mark.xfail(
    strict=True, reason='hf-graphed replays give stale logits after the first step under '
    'transformers 5.17 (measured; recapture per step is exact)')


@pytest.mark.parametrize('stack', ATTENTION)
def test_attention_stack_is_as_close_to_float32_as_the_default(tmp_path, stack):
    spec = str(save_tiny('llama-3.1-8b', tmp_path))
    logits = teacher_forced(spec, ('hf', f'hf:{stack}'))
    default = median_error(logits, 'hf', 'f32')
    error = median_error(logits, f'hf:{stack}', 'f32')
    print(f'hf:{stack}: median logit rel. error vs float32 {error:.5f} (hf sdpa {default:.5f})')
    assert error <= 1.5 * default + 1e-3


# What a stack may add to the bf16 model's own distance from float32 (relative logit error):
# round-to-nearest codes err by about step/sqrt(12) per weight, 10% of a Gaussian weight's
# spread at 4 bits, under 1% at 8; 3x that as margin. Measured on the H200, bf16 alone is
# 0.035 from float32 on the 64-wide tiny model (the attention test), so the bound sits on top.
QUANT_BOUND = {'bnb-nf4': 0.3, 'torchao-int4': 0.3, 'torchao-int8': 0.03}


@pytest.mark.parametrize('stack', sorted(QUANT_BOUND))
def test_quantisation_stack_stays_near_the_bf16_model(tmp_path, stack):
    if stacks.missing(stacks.STACKS[stack], torch.device('cuda')):
        pytest.skip(stacks.missing(stacks.STACKS[stack], torch.device('cuda')))
    # Group-128 formats need inputs in whole groups: a small model with 256-wide layers.
    spec = str(save_tiny('llama-3.1-8b', tmp_path, sizes={
        'hidden_size': 256, 'intermediate_size': 512, 'num_attention_heads': 4,
        'num_key_value_heads': 2, 'head_dim': 64}))
    logits = teacher_forced(spec, ('hf', f'hf:{stack}'))
    bf16 = median_error(logits, 'hf', 'f32')
    error = median_error(logits, f'hf:{stack}', 'f32')
    print(f'{stack}: median logit rel. error vs float32 {error:.5f} (bf16 alone {bf16:.5f})')
    assert error < bf16 + QUANT_BOUND[stack]


@HF_GRAPHED_STALE
def test_hf_graphed_replays_the_hf_forward(tmp_path):
    # 40 replayed steps: a cache written ahead of where attention reads (transformers 5's
    # StaticCache counts its own writes) shows as a large error from the first replay on.
    spec = str(save_tiny('llama-3.1-8b', tmp_path))
    logits = teacher_forced(spec, ('hf', 'hf-graphed'), steps=40)
    errors = [rel(a, b) for a, b in zip(logits['hf-graphed'], logits['hf'])]
    print(f'hf-graphed vs hf: median {statistics.median(errors):.5f}, max {max(errors):.5f}')
    assert max(errors) < 0.02
