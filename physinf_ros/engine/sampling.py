"""
Next-token choice: greedy, temperature and nucleus (top-p) sampling.

Sampling draws the token as argmax(p / E) with E ~ Exp(1) per token (the exponential race),
which picks token i with probability p_i, like multinomial sampling, but needs no host
synchronisation and no data-dependent shapes, so it can run inside a captured CUDA graph with
temperature and top_p held in device tensors and E drawn into a buffer before each replay (by
the request's seeded generator, which a captured graph could not be re-seeded with).

Temperature: any value gives a valid distribution. A temperature below MIN_TEMPERATURE
(float32's smallest normal number, 2**-126, about 1.18e-38), 0 included, is greedy:
`Sampling.greedy` is true, so every backend takes its argmax path. The rule comes from the
sampling dtype, float32. The logits are shifted so that the largest is 0 before they are
divided, so (logit - max) / temperature lies in [-inf, 0] and cannot overflow to +inf, whatever
the logit range; unshifted, logit / temperature overflowed for temperatures below
max|logit| / 3.4e38 (about 1e-37 for logits near 30) and softmax made NaN of inf - inf. What is
left unsafe is a temperature that is not a normal float32: 1e-300 rounds to 0 (0 / 0 is NaN) and
1e-45 is subnormal (flushed to 0 where the device flushes subnormals). `sample` itself raises
the temperature to MIN_TEMPERATURE, so the captured graph, which reads it from a device tensor,
is safe too. Near the threshold sampling is greedy in effect: a token whose logit trails the
largest by more than about 104 x temperature gets probability 0 in float32.
"""

from typing import Optional, Tuple, Union

import torch

from .base import MIN_TEMPERATURE, Sampling

Number = Union[float, torch.Tensor]


def make_generator(sampling: Sampling, device: torch.device) -> Optional[torch.Generator]:
    """Seeded generator for one request; None leaves torch's global RNG in charge."""
    if sampling.greedy or sampling.seed is None:
        return None
    gen = torch.Generator(device=device)
    gen.manual_seed(int(sampling.seed))
    return gen


def _nucleus(logits: torch.Tensor, temperature: Number,
             top_p: Number) -> Tuple[torch.Tensor, torch.Tensor]:
    """Sorted probabilities [..., vocab] under temperature, top-p's cut zeroed; their order."""
    logits = logits.float()
    # amax(), clamp_min(): no host reads, so this runs inside a graph capture (module docstring).
    scaled = (logits - logits.amax(-1, keepdim=True)) / _at_least(temperature, MIN_TEMPERATURE)
    probs = torch.softmax(scaled, dim=-1)
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
    # Keep the smallest prefix whose mass reaches top_p; the most likely token always stays.
    outside = (torch.cumsum(sorted_probs, dim=-1) - sorted_probs) >= top_p
    return sorted_probs.masked_fill(outside, 0.0), order


def sample(logits: torch.Tensor, temperature: Number, top_p: Number,
           generator: Optional[torch.Generator] = None,
           race: Optional[torch.Tensor] = None) -> torch.Tensor:
    """
    Draw one token id from logits [vocab]; returns a long tensor [1] on logits' device.

    temperature and top_p may be 0-d device tensors (the captured graph's). race: Exp(1) noise
    [vocab] drawn beforehand; drawn here from generator when None.
    """
    sorted_probs, order = _nucleus(logits, temperature, top_p)
    if race is None:
        race = torch.empty_like(sorted_probs).exponential_(generator=generator)
    # index_select, not order[i]: indexing with a 0-d tensor reads it on the host, which a
    # graph capture forbids.
    return order.index_select(0, torch.argmax(sorted_probs / race, dim=-1, keepdim=True))


def probabilities(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Return the distribution sample draws from, per row of logits [..., vocab] (float32)."""
    sorted_probs, order = _nucleus(logits, temperature, top_p)
    kept = torch.zeros_like(sorted_probs).scatter_(-1, order, sorted_probs)
    return kept / kept.sum(-1, keepdim=True)


def _at_least(value: Number, low: float) -> Number:
    return value.clamp_min(low) if isinstance(value, torch.Tensor) else max(value, low)


def mask_logits(logits: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    """
    Logits [vocab] with every token that bits does not allow at -inf.

    bits: int32 [ceil(vocab / 32)] on logits' device, bit i of word w for token 32 w + i (the
    grammar's bitmask). Shifts and masks only, so this too runs inside a captured graph.
    """
    shifts = torch.arange(32, dtype=torch.int32, device=bits.device)
    allowed = ((bits.unsqueeze(1) >> shifts) & 1).view(-1)[:logits.shape[-1]].bool()
    return logits.masked_fill(~allowed, float('-inf'))


def choose(logits: torch.Tensor, sampling: Sampling,
           generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Greedy argmax, or a sample under the request's temperature and top_p."""
    if sampling.greedy:
        return torch.argmax(logits, dim=-1)
    return sample(logits, sampling.temperature, sampling.top_p, generator)
