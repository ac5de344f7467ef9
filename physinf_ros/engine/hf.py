"""
The reference backend: the transformers forward with its KV cache, one token per step.

Every other backend is checked against this one on the same weights.
"""

import inspect

import torch

from .base import DecoderInfo
from .forward import ForwardDecoder


def load_hf_model(path, device: torch.device, dtype: torch.dtype):
    """Load a transformers causal LM from a directory onto device, in eval mode."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()  # a progress bar per load is noise in a node's log
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype)
    return model.to(device).eval()


class HFDecoder(ForwardDecoder):
    """transformers forward with a DynamicCache."""

    def __init__(self, model, info: DecoderInfo, device: torch.device):
        super().__init__(info, device)
        self.model = model
        self._cache = None
        # transformers renamed past_key_values to cache (5.2x); use whichever this one takes.
        params = inspect.signature(model.forward).parameters
        self._cache_arg = 'cache' if 'cache' in params else 'past_key_values'

    def _reset_cache(self) -> None:
        from transformers import DynamicCache
        self._cache = DynamicCache(config=self.model.config)

    def _forward(self, ids: torch.Tensor, start: int) -> torch.Tensor:
        out = self.model(input_ids=ids, use_cache=True, logits_to_keep=1,
                         **{self._cache_arg: self._cache})
        return out.logits[0, -1].float()
