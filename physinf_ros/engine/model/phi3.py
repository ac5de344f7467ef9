"""
Phi-3's forward (Phi-4-mini): the Llama layer, read from fused checkpoints, partial rotary.

Checkpoints hold QKV (`qkv_proj`) and gate/up (`gate_up_proj`, gate first) fused; they are
split at load into llama.py's names, float or GPTQ alike, and fused again llama.py's way.
RoPE turns the first rotary_dim dimensions of each head (pairs i, i + rotary_dim / 2) and
leaves the rest: at load the q and k rows of each head are laid out so that those pairs are
rotate-half's pairs (i, i + head_dim / 2) and the rest pairs that the tables leave alone (cos 1,
sin 0). Scores are dot products of q and k, unchanged when both are permuted alike, so the
Llama step and its kernels run Phi-3 as they are.
Long-context RoPE (longrope) divides the frequencies by the short factors while the sequence is
within original_max_position_embeddings and by the long ones past it, cos and sin scaled by the
attention factor, as transformers' Phi3RotaryEmbedding does for each forward: a decode step at
position p is within when p < original, a prompt of n tokens when n <= original.
modeling_phi3.py is the reference.
"""

import math
from typing import Dict, List, Tuple

import torch

from . import llama
from .config import ModelConfig
from .llama import (decode_layers as _decode, inverse_frequencies, KVCache,
                    prompt_logits as _logits, table, Weights)
from ..weights import gptq

__all__ = ['decode_layers', 'from_state_dict', 'KVCache', 'prompt_logits',
           'rope_tables']


def head_order(config: ModelConfig) -> torch.Tensor:
    """Return a head's dimensions in our order: rotated first halves, the rest, their seconds."""
    d, r = config.head_dim, config.rotary_dim
    rest = d - r
    return torch.cat([torch.arange(r // 2), r + torch.arange(rest // 2),
                      r // 2 + torch.arange(r // 2), r + rest // 2 + torch.arange(rest // 2)])


def _split(state: Dict[str, torch.Tensor], fused: str, parts: List[Tuple[str, int]]) -> None:
    # Split a fused linear's outputs (rows of a float weight, columns of GPTQ tensors).
    ends = torch.tensor([rows for _, rows in parts]).cumsum(0).tolist()
    starts = [0] + ends[:-1]
    if fused + '.weight' in state:
        weight = state.pop(fused + '.weight')
        for (name, _), a, b in zip(parts, starts, ends):
            state[name + '.weight'] = weight[a:b]
        return
    qweight, scales = state.pop(fused + '.qweight'), state.pop(fused + '.scales')
    qzeros, g_idx = state.pop(fused + '.qzeros'), state.pop(fused + '.g_idx', None)
    for (name, _), a, b in zip(parts, starts, ends):
        state[name + '.qweight'] = qweight[:, a:b].contiguous()
        state[name + '.scales'] = scales[:, a:b].contiguous()
        # Zero points pack eight outputs a word: every split here falls on a word boundary.
        state[name + '.qzeros'] = qzeros[:, a // 8:b // 8].contiguous()
        if g_idx is not None:
            state[name + '.g_idx'] = g_idx


def _permute(state: Dict[str, torch.Tensor], name: str, rows: torch.Tensor) -> None:
    # Reorder a linear's outputs: rows of a float weight, columns of GPTQ tensors.
    if name + '.weight' in state:
        state[name + '.weight'] = state[name + '.weight'][rows]
        return
    state[name + '.qweight'] = state[name + '.qweight'][:, rows].contiguous()
    state[name + '.scales'] = state[name + '.scales'][:, rows].contiguous()
    state[name + '.qzeros'] = gptq.pack_zeros(gptq.unpack_zeros(state[name + '.qzeros'])[:, rows])


def from_state_dict(config: ModelConfig, state: Dict[str, torch.Tensor],
                    device: torch.device, dtype: torch.dtype) -> Weights:
    """Split, lay out and fuse a Phi-3 state dict into Weights; consumes (empties) state."""
    order = head_order(config)
    for i in range(config.num_layers):
        p = f'model.layers.{i}.'
        _split(state, p + 'self_attn.qkv_proj', [(p + 'self_attn.q_proj', config.q_size),
                                                 (p + 'self_attn.k_proj', config.kv_size),
                                                 (p + 'self_attn.v_proj', config.kv_size)])
        _split(state, p + 'mlp.gate_up_proj', [(p + 'mlp.gate_proj', config.intermediate_size),
                                               (p + 'mlp.up_proj', config.intermediate_size)])
        for name, heads in (('q_proj', config.num_heads), ('k_proj', config.num_kv_heads)):
            rows = (torch.arange(heads)[:, None] * config.head_dim + order).flatten()
            _permute(state, p + 'self_attn.' + name, rows)
    return llama.from_state_dict(config, state, device, dtype)


def rope_tables(config: ModelConfig, max_context: int, device: torch.device):
    """
    Tables cos, sin [2, max_context, head_dim / 2]: a decode step's, then a long prompt's.

    Row p of the first holds what a step at position p rotates with (short factors below
    original_max_position_embeddings, long ones from it); the second the long factors at every
    position, which a prompt longer than the original length reads. Without longrope both are
    the one table.
    """
    scaling = dict(config.rope_scaling or ())
    positions = torch.arange(max_context)
    dim = config.rotary_dim
    if scaling.get('rope_type') != 'longrope':
        cos, sin = table(config, inverse_frequencies(dim, config.rope_theta, config.rope_scaling),
                         positions, device)
        return torch.stack([cos, cos]), torch.stack([sin, sin])
    original, factor = scaling['original_max_position_embeddings'], scaling['factor']
    attention = scaling.get('attention_factor') or (
        math.sqrt(1 + math.log(factor) / math.log(original)) if factor > 1 else 1.0)
    short = table(config, inverse_frequencies(dim, config.rope_theta, config.rope_scaling),
                  positions, device, attention)
    long = table(config, inverse_frequencies(dim, config.rope_theta, config.rope_scaling, True),
                 positions, device, attention)
    within = (positions < original).to(device)[:, None]
    return (torch.stack([torch.where(within, short[0], long[0]), long[0]]),
            torch.stack([torch.where(within, short[1], long[1]), long[1]]))


def _long(config: ModelConfig, n: int) -> int:
    scaling = dict(config.rope_scaling or ())
    return int(n > scaling.get('original_max_position_embeddings', n))


# No prefix reuse: which rotary table (short or long factors) a prompt's keys get depends on
# the prompt's whole length, so a kept prefix's keys may not be what a cold prefill computes.
REUSES_PREFIX = False


@torch.inference_mode()
def prompt_logits(w: Weights, cache: KVCache, ids: torch.Tensor, cos: torch.Tensor,
                  sin: torch.Tensor, last_only: bool = False, start: int = 0,
                  ops: llama.PromptOps = llama.TORCH_PROMPT) -> torch.Tensor:
    """Float32 logits [n, vocab] of every position of ids [n] from position 0 (start must be 0)."""
    if start:
        raise ValueError('phi3 prompts start at position 0 (REUSES_PREFIX is False)')
    kind = _long(w.config, ids.shape[0])
    return _logits(w, cache, ids, cos[kind], sin[kind], last_only, ops=ops)


def decode_layers(w: Weights, cache: KVCache, token: torch.Tensor, pos: torch.Tensor,
                  cos: torch.Tensor, sin: torch.Tensor, ops) -> torch.Tensor:
    """Every layer for token [1] at position pos [1] on the device, on the decode table."""
    return _decode(w, cache, token, pos, cos[0], sin[0], ops)
