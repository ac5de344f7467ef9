"""Prefill/step bookkeeping for backends built on a plain forward(ids, start) -> logits."""

from typing import List, Optional, Sequence

import torch

from ..base import (AllowedTokens, check_prompt, check_room, DecoderInfo, DeferredStep,
                    EngineError, PendingStep, reusable_prefix, Sampling)
from ..sampling import choose, make_generator, mask_logits


class ForwardDecoder:
    """
    Implements the Decoder protocol on top of two backend hooks.

    Subclasses provide ``_reset_cache()`` and ``_forward(ids [1, n], start) -> logits [vocab]``,
    and ``_crop_cache(n) -> bool`` where their cache can drop all but its first n tokens (a
    prefill then keeps the prefix it shares with the held sequence). Every step reads its token
    back before the next is fed, so the held sequence is exactly what was fed.
    """

    def __init__(self, info: DecoderInfo, device: torch.device):
        self.info = info
        self.device = device
        self.ids_device = device   # where _forward wants its token ids
        self._position = 0
        self._last_token: Optional[int] = None
        self._logits: Optional[torch.Tensor] = None
        self._sampling = Sampling()
        self._generator: Optional[torch.Generator] = None
        self._allowed: Optional[AllowedTokens] = None
        self.reuse_prefix = True
        self.cached_tokens = 0
        self._held: List[int] = []   # the tokens whose keys and values the cache holds

    @property
    def position(self) -> int:
        return self._position

    def _reset_cache(self) -> None:
        raise NotImplementedError

    def _forward(self, ids: torch.Tensor, start: int) -> torch.Tensor:
        raise NotImplementedError

    def _crop_cache(self, length: int) -> bool:
        """Keep only the cache's first length tokens; False where this cache cannot."""
        return False

    def _choose(self, logits: torch.Tensor) -> int:
        self._logits = logits
        if self._allowed is not None:
            logits = mask_logits(logits, torch.from_numpy(self._allowed.bits).to(logits.device))
        self._last_token = int(choose(logits, self._sampling, self._generator))
        return self._last_token

    @torch.inference_mode()
    def prefill(self, token_ids: Sequence[int], sampling: Sampling,
                allowed: Optional[AllowedTokens] = None) -> int:
        check_prompt(token_ids, self.info.max_context)
        keep = reusable_prefix(self._held, token_ids) if self.reuse_prefix else 0
        if not (keep and self._crop_cache(keep)):
            keep = 0
            self._reset_cache()
        # Until the prompt is in, the cache holds only the kept prefix (a failed forward may
        # have written part of the rest).
        self._held = list(token_ids[:keep])
        self._last_token = None
        self._sampling = sampling
        self._allowed = allowed
        self._generator = make_generator(sampling, self.device)
        ids = torch.tensor([list(token_ids[keep:])], dtype=torch.long, device=self.ids_device)
        logits = self._forward(ids, keep)
        self._position = len(token_ids)
        self._held = list(token_ids)
        self.cached_tokens = keep
        return self._choose(logits)

    @torch.inference_mode()
    def step(self, token: Optional[int] = None) -> int:
        if self._last_token is None:
            raise EngineError('step() before prefill()')
        check_room(self._position, self.info.max_context)
        fed = self._last_token if token is None else token
        ids = torch.tensor([[fed]], dtype=torch.long, device=self.ids_device)
        logits = self._forward(ids, self._position)
        self._position += 1
        self._held.append(fed)
        return self._choose(logits)

    def launch(self) -> PendingStep:
        # These forwards read the chosen token back on the host inside every step, so nothing
        # is gained by launching ahead: the plain loop, run when waited for.
        return DeferredStep(self.step)

    def last_logits(self) -> torch.Tensor:
        if self._logits is None:
            raise EngineError('no logits yet: call prefill() first')
        return self._logits.float()
