"""
Next-token choice: greedy, temperature and nucleus (top-p) sampling.

Sampling draws the token as argmax(p / E) with E ~ Exp(1) per token (the exponential race),
which picks token i with probability p_i, like multinomial sampling, but needs no host
synchronisation and no data-dependent shapes, so it can run inside a captured CUDA graph with
temperature and top_p held in device tensors and E drawn into a buffer before each replay (by
the request's seeded generator, which a captured graph could not be re-seeded with).
"""

from typing import Optional, Union

import torch

from .base import Sampling

Number = Union[float, torch.Tensor]


def make_generator(sampling: Sampling, device: torch.device) -> Optional[torch.Generator]:
    """Seeded generator for one request; None leaves torch's global RNG in charge."""
    if sampling.greedy or sampling.seed is None:
        return None
    gen = torch.Generator(device=device)
    gen.manual_seed(int(sampling.seed))
    return gen


def sample(logits: torch.Tensor, temperature: Number, top_p: Number,
           generator: Optional[torch.Generator] = None,
           race: Optional[torch.Tensor] = None) -> torch.Tensor:
    """
    Draw one token id from logits [vocab]; returns a long tensor [1] on logits' device.

    race: Exp(1) noise [vocab] drawn beforehand; drawn here from generator when None.
    """
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    sorted_probs, order = torch.sort(probs, descending=True)
    # Keep the smallest prefix whose mass reaches top_p; the most likely token always stays.
    outside = (torch.cumsum(sorted_probs, dim=-1) - sorted_probs) >= top_p
    sorted_probs = sorted_probs.masked_fill(outside, 0.0)
    if race is None:
        race = torch.empty_like(sorted_probs).exponential_(generator=generator)
    # index_select, not order[i]: indexing with a 0-d tensor reads it on the host, which a
    # graph capture forbids.
    return order.index_select(0, torch.argmax(sorted_probs / race, dim=-1, keepdim=True))


def choose(logits: torch.Tensor, sampling: Sampling,
           generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Greedy argmax, or a sample under the request's temperature and top_p."""
    if sampling.greedy:
        return torch.argmax(logits, dim=-1)
    return sample(logits, sampling.temperature, sampling.top_p, generator)
