"""Our decoder against the transformers reference: greedy decode and teacher-forced logits."""

import math

from physinf_ros.engine import Sampling
import torch

STEPS = 32


def rel(a, b):
    """Relative error of a against b (Frobenius norms)."""
    return ((a - b).norm() / b.norm()).item()


def bf16_ulp(value: float) -> float:
    """Spacing of bf16 numbers at value (8 significant bits)."""
    return 2.0 ** (math.floor(math.log2(max(abs(value), 1e-30))) - 7)


def assert_same_decode(reference, ours, prompt_ids, steps=STEPS):
    """Greedy tokens identical and logits within 1e-4 relative, prefill and every step."""
    greedy = Sampling()
    tokens = ([reference.decoder.prefill(prompt_ids, greedy)],
              [ours.decoder.prefill(prompt_ids, greedy)])
    for step in range(steps):
        ref_logits = reference.decoder.last_logits()
        our_logits = ours.decoder.last_logits()
        error = (our_logits - ref_logits).norm() / ref_logits.norm()
        assert error < 1e-4, f'step {step}: relative logit error {error:.2e}'
        assert tokens[0] == tokens[1], f'tokens differ at step {step}'
        tokens[0].append(reference.decoder.step())
        tokens[1].append(ours.decoder.step())
    assert tokens[0] == tokens[1]
    return tokens[1]


def assert_same_prompt_logits(reference, ours, token_ids, tolerance=1e-4):
    """Teacher-forced logits of every position within tolerance (relative, per row)."""
    model = reference.decoder.model   # the hf backend's transformers model, whole sequence
    with torch.no_grad():
        ref = model(torch.tensor([token_ids], device=model.device)).logits[0].float()
    out = ours.decoder.prompt_logits(token_ids).float().to(ref.device)
    error = ((out - ref).norm(dim=-1) / ref.norm(dim=-1)).max()
    assert error < tolerance, f'relative logit error {error:.2e}'
