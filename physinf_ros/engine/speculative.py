"""
Speculative decoding: propose k tokens cheaply, verify them in one step, keep what the model says.

A verify step (Decoder.verify) runs the pending token and k drafted ones at consecutive positions
in one forward that reads the weights once, and returns the k + 1 rows of logits: row i is the
model's distribution after the draft's first i tokens. What is kept is decided here:

- greedy: the draft's longest prefix that equals the model's argmax at each row, then the
  model's own argmax at the first row that disagrees (or after the whole draft): 1 to k + 1
  tokens, exactly the tokens the one-token loop would choose on the same logits;
- sampled: the speculative-sampling rule of Leviathan et al. (2023) and Chen et al. (2023) for a
  draft drawn from q: draft token x at row i is kept with probability min(1, p_i(x) / q_i(x)); at
  the first rejection the token is drawn from max(0, p_i - q_i) renormalised; after a whole
  draft, one more from p_k. Every proposer here drafts deterministically (q_i is one token with
  probability 1), so x is kept with probability p_i(x) and a rejection draws from p_i without x.
  The kept tokens are distributed as tokens drawn one at a time from p (the tests check it).

p is the distribution the one-token loop samples from: temperature, then top-p (sampling.py's
probabilities). The cache holds the positions of every verified row; the decoder then rewinds to
the kept ones (Decoder.rewind), so a rejected token's keys and values are overwritten later.

Proposers: PromptLookup matches the last n tokens of the sequence (prompt and reply) against
earlier places in it and proposes what followed there (prompt-lookup decoding: replies that copy
names, fields and structure from their prompt get them at no model cost); DraftModel steps a
smaller model of the same vocabulary k times.
"""

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

import torch

from .base import EngineError, reusable_prefix, Sampling
from .sampling import probabilities

# Drafted tokens per verify step at most: one captured verify graph per draft length up to it.
MAX_DRAFT = 8
# The longest n-gram prompt lookup matches (it tries the longest first, down to one token).
NGRAM_MAX = 3


@dataclass(frozen=True)
class Speculation:
    """
    A speculation setting: off, ngram:K (prompt lookup) or draft:MODEL:K (a draft model).

    MODEL is any model spec (it may hold colons itself: draft:synthetic:llama-3.2-1b:4).
    """

    kind: str = 'off'
    k: int = 0
    draft_model: str = ''

    @property
    def on(self) -> bool:
        return self.kind != 'off'

    @classmethod
    def parse(cls, text: str) -> 'Speculation':
        """Read 'off', 'ngram:K' or 'draft:MODEL:K'; ValueError saying what is wrong."""
        text = text.strip()
        if text in ('', 'off'):
            return cls()
        kind, _, rest = text.partition(':')
        model, _, k_text = rest.rpartition(':') if kind == 'draft' else ('', '', rest)
        if kind not in ('ngram', 'draft') or (kind == 'draft' and not model):
            raise ValueError(f'speculation {text!r}: use off, ngram:K or draft:MODEL:K '
                             f'(K drafted tokens per step, 1 to {MAX_DRAFT})')
        try:
            k = int(k_text)
        except ValueError:
            k = 0
        if not 1 <= k <= MAX_DRAFT:
            raise ValueError(f'speculation {text!r}: K must be an integer from 1 to {MAX_DRAFT}')
        return cls(kind, k, model)

    def __str__(self) -> str:
        if not self.on:
            return 'off'
        return f'ngram:{self.k}' if self.kind == 'ngram' else f'draft:{self.draft_model}:{self.k}'


class PromptLookup:
    """Propose the tokens that followed the latest earlier match of the sequence's last n-gram."""

    def __init__(self, k: int, ngram_max: int = NGRAM_MAX):
        self.k = k
        self.ngram_max = ngram_max

    def start(self, prompt_ids: Sequence[int], sampling: Sampling) -> None:
        """Start a reply: nothing to prepare (the sequence itself is the table)."""

    def propose(self, sequence: Sequence[int], k: int) -> List[int]:
        """Up to k tokens; [] when no n-gram of the sequence's end occurred before."""
        seq = list(sequence)
        for n in range(min(self.ngram_max, len(seq) - 1), 0, -1):
            tail = seq[-n:]
            # The latest earlier occurrence: the nearest context is the likeliest to repeat.
            for start in range(len(seq) - n - 1, -1, -1):
                if seq[start:start + n] == tail:
                    return seq[start + n:start + n + k]
        return []

    def close(self) -> None:
        """Nothing held."""


class DraftModel:
    """
    Propose k tokens by k greedy steps of a smaller model with the same vocabulary.

    Its decoder follows the sequence: at each proposal it rewinds to the longest prefix it
    holds of the sequence and feeds what it lacks (teacher-forced), then drafts.
    """

    def __init__(self, engine, k: int):
        self.engine = engine
        self.k = k
        self._fed: List[int] = []   # tokens whose keys and values the draft's cache holds

    def start(self, prompt_ids: Sequence[int], sampling: Sampling) -> None:
        """Prefill the draft model with the reply's prompt (greedy: it proposes, never samples)."""
        decoder = self.engine.decoder
        decoder.reuse_prefix = True
        decoder.prefill(prompt_ids, Sampling())
        self._fed = list(prompt_ids)

    def propose(self, sequence: Sequence[int], k: int) -> List[int]:
        decoder = self.engine.decoder
        seq = list(sequence)
        # The sequence is what the target holds plus its pending last token; the draft keeps
        # its longest common prefix with all but that last token (as a prefill keeps a held
        # prefix) and feeds the rest.
        keep = reusable_prefix(self._fed, seq)
        if keep < len(self._fed):
            decoder.rewind(keep, seq[keep])
            self._fed = seq[:keep]
        # Feed what the draft lacks of the sequence (teacher-forced): its last choice is the
        # first drafted token; each drafted token but the last is fed for the next.
        k = min(k, decoder.info.max_context - 1 - len(seq))
        draft: List[int] = []
        for fed in seq[keep:]:
            token = decoder.step(fed)
            self._fed.append(fed)
        while k > 0:
            draft.append(token)
            if len(draft) == k:
                break
            token = decoder.step(token)
            self._fed.append(draft[-1])
        return draft

    def close(self) -> None:
        self.engine.close()


def accept_greedy(logits: torch.Tensor, draft: Sequence[int]) -> List[int]:
    """Return the tokens kept from a verify's logits [k + 1, vocab] for draft [k], greedy."""
    choices = torch.argmax(logits[:len(draft) + 1], dim=-1).tolist()
    kept = []
    for drafted, chosen in zip(draft, choices):
        if drafted != chosen:
            break
        kept.append(drafted)
    return kept + [choices[len(kept)]]


def accept_sampled(logits: torch.Tensor, draft: Sequence[int], sampling: Sampling,
                   generator: Optional[torch.Generator] = None) -> List[int]:
    """
    Return the tokens kept from a verify's logits [k + 1, vocab], deterministic draft [k].

    Each drafted token is kept with its probability under p; at the first rejection the next
    token is drawn from p without it (renormalised); after a whole draft, one from p_k.
    """
    k = len(draft)
    probs = probabilities(logits[:k + 1], sampling.temperature, sampling.top_p)
    device = probs.device
    drafted = torch.tensor(list(draft), dtype=torch.long, device=device)
    p_draft = probs[torch.arange(k, device=device), drafted] if k else probs[:0, 0]
    uniform = torch.rand(k, generator=generator, device=device)
    keeps = (uniform < p_draft).tolist()
    kept = []
    for token, keep in zip(draft, keeps):
        if not keep:
            residual = probs[len(kept)].clone()
            residual[token] = 0.0
            return kept + [_draw(residual, generator)]
        kept.append(token)
    return kept + [_draw(probs[k], generator)]


def _draw(weights: torch.Tensor, generator: Optional[torch.Generator]) -> int:
    total = weights.sum()
    if not total > 0:
        raise EngineError('speculative sampling drew from an empty distribution')
    return int(torch.multinomial(weights / total, 1, generator=generator))


def check_verifies(decoder) -> None:
    """Refuse speculation (EngineError) where decoder cannot verify drafts."""
    if not hasattr(decoder, 'verify'):
        raise EngineError(f'backend {decoder.info.backend} cannot verify drafts: speculation '
                          'needs backend eager or graphed')


def counts(generation) -> Dict[str, Any]:
    """Return a reply's speculation figures (a Generation's), as reports give them."""
    return {'tokens_per_step': round(generation.tokens_per_step, 3),
            'verify_steps': generation.verify_steps,
            'drafted_tokens': generation.drafted_tokens,
            'accepted_tokens': generation.accepted_tokens}


def acceptance(figures: Dict[str, Any]) -> Optional[float]:
    """Return the fraction of drafted tokens the model kept; None when nothing was drafted."""
    drafted = figures['drafted_tokens']
    return figures['accepted_tokens'] / drafted if drafted else None


def summary(figures: Dict[str, Any]) -> str:
    """Say '2.31 tokens per step, 120 of 184 drafted tokens accepted (65%)', for logs."""
    kept = acceptance(figures)
    return (f"{figures['tokens_per_step']:.2f} tokens per step, {figures['accepted_tokens']} of "
            f"{figures['drafted_tokens']} drafted tokens accepted"
            + (f' ({kept:.0%})' if kept is not None else ''))
