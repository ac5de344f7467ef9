"""Next-token choice: greedy, temperature and nucleus (top-p) sampling."""

from typing import Optional

import torch

from .base import Sampling


def make_generator(sampling: Sampling, device: torch.device) -> Optional[torch.Generator]:
    """Seeded generator for one request; None leaves torch's global RNG in charge."""
    if sampling.greedy or sampling.seed is None:
        return None
    gen = torch.Generator(device=device)
    gen.manual_seed(int(sampling.seed))
    return gen


def sample(logits: torch.Tensor, sampling: Sampling,
           generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Choose one token id from logits [vocab]; returns a 0-d long tensor on logits' device."""
    if sampling.greedy:
        return torch.argmax(logits, dim=-1)
    probs = torch.softmax(logits.float() / sampling.temperature, dim=-1)
    if sampling.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        # Keep the smallest prefix whose mass reaches top_p; the first token always stays.
        outside = (torch.cumsum(sorted_probs, dim=-1) - sorted_probs) >= sampling.top_p
        sorted_probs = sorted_probs.masked_fill(outside, 0.0)
        choice = torch.multinomial(sorted_probs, 1, generator=generator)
        return order[choice].squeeze(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
