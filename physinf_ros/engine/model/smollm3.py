"""
SmolLM3's forward (3B): the Llama layer, with no RoPE on the layers of `nope_layers`.

transformers' SmolLM3Config.no_rope_layers holds 1 where a layer uses RoPE (every fourth
layer has none by default); config.py turns it into the layers without. Those layers read an
identity table (cos 1, sin 0), so one kernel serves both kinds and nothing in the step
branches. modeling_smollm3.py is the reference.
"""

import torch

from . import llama
from .config import ModelConfig
from .llama import (decode_layers_by_table, from_state_dict, KVCache, prompt_logits_by_layer,
                    PromptOps, TORCH_PROMPT, Weights)

__all__ = ['decode_layers', 'from_state_dict', 'KVCache', 'prompt_logits',
           'rope_tables']


def rope_tables(config: ModelConfig, max_context: int, device: torch.device):
    """Tables cos, sin [2, max_context, head_dim / 2]: RoPE's, then the identity's."""
    cos, sin = llama.rope_tables(config, max_context, device)
    return torch.stack([cos, torch.ones_like(cos)]), torch.stack([sin, torch.zeros_like(sin)])


def _by_layer(config: ModelConfig, cos: torch.Tensor, sin: torch.Tensor) -> list:
    kinds = [int(i in config.nope_layers) for i in range(config.num_layers)]
    return [(cos[kind], sin[kind]) for kind in kinds]


REUSES_PREFIX = True   # a prefill may start after a prefix the cache holds (llama's)


@torch.inference_mode()
def prompt_logits(w: Weights, cache: KVCache, ids: torch.Tensor, cos: torch.Tensor,
                  sin: torch.Tensor, last_only: bool = False, start: int = 0,
                  ops: PromptOps = TORCH_PROMPT) -> torch.Tensor:
    """Float32 logits [n, vocab] of each position of ids [n] from start (llama's)."""
    return prompt_logits_by_layer(w, cache, ids, _by_layer(w.config, cos, sin), last_only,
                                  start, ops)


def decode_layers(w: Weights, cache: KVCache, token: torch.Tensor, pos: torch.Tensor,
                  cos: torch.Tensor, sin: torch.Tensor, ops) -> torch.Tensor:
    """Every layer for token [1] at position pos [1] on the device (llama.decode_layers)."""
    return decode_layers_by_table(w, cache, token, pos, _by_layer(w.config, cos, sin), ops)
