"""Prefill/step bookkeeping for backends built on a plain forward(ids, start) -> logits."""

from typing import Optional, Sequence

import torch

from .base import ContextFull, DecoderInfo, EngineError, Sampling
from .sampling import choose, make_generator


class ForwardDecoder:
    """
    Implements the Decoder protocol on top of two backend hooks.

    Subclasses provide ``_reset_cache()`` and ``_forward(ids [1, n], start) -> logits [vocab]``.
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

    @property
    def position(self) -> int:
        return self._position

    def _reset_cache(self) -> None:
        raise NotImplementedError

    def _forward(self, ids: torch.Tensor, start: int) -> torch.Tensor:
        raise NotImplementedError

    def _choose(self, logits: torch.Tensor) -> int:
        self._logits = logits
        self._last_token = int(choose(logits, self._sampling, self._generator))
        return self._last_token

    @torch.inference_mode()
    def prefill(self, token_ids: Sequence[int], sampling: Sampling) -> int:
        if not token_ids:
            raise EngineError('empty prompt: nothing to decode from')
        if len(token_ids) >= self.info.max_context:
            raise ContextFull(f'prompt of {len(token_ids)} tokens leaves no room in a context '
                              f'of {self.info.max_context} tokens')
        self._reset_cache()
        self._sampling = sampling
        self._generator = make_generator(sampling, self.device)
        ids = torch.tensor([list(token_ids)], dtype=torch.long, device=self.ids_device)
        logits = self._forward(ids, 0)
        self._position = len(token_ids)
        return self._choose(logits)

    @torch.inference_mode()
    def step(self, token: Optional[int] = None) -> int:
        if self._last_token is None:
            raise EngineError('step() before prefill()')
        # Prompt plus reply never exceed max_context tokens.
        if self._position + 1 >= self.info.max_context:
            raise ContextFull(f'context of {self.info.max_context} tokens is full')
        fed = self._last_token if token is None else token
        ids = torch.tensor([[fed]], dtype=torch.long, device=self.ids_device)
        logits = self._forward(ids, self._position)
        self._position += 1
        return self._choose(logits)

    def last_logits(self) -> torch.Tensor:
        if self._logits is None:
            raise EngineError('no logits yet: call prefill() first')
        return self._logits.float()
