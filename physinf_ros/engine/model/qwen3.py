"""
Qwen3's forward (0.6B to 8B): the Llama layer with an RMSNorm on each q and k head before RoPE.

Everything else (fused QKV and gate/up, the static cache, the rotary tables, the head) is
llama.py's; transformers' modeling_qwen3.py is the reference.
"""

from dataclasses import dataclass
from typing import Dict, Optional

import torch
import torch.nn.functional as F

from .config import ModelConfig
from .llama import (attend_prompt, finish, KVCache, Linear, PromptOps, rope_tables,
                    StateReader, TORCH_PROMPT, Weights)

__all__ = ['decode_layers', 'from_state_dict', 'KVCache', 'prompt_logits',
           'rope_tables']


@dataclass
class Layer:
    """One Qwen3 layer: llama.Layer's weights and the q and k heads' norms."""

    attn_norm: torch.Tensor     # [H]
    wqkv: Linear                # [q + 2 kv, H]
    bqkv: Optional[torch.Tensor]
    q_norm: torch.Tensor        # [head_dim]
    k_norm: torch.Tensor        # [head_dim]
    wo: Linear                  # [H, q]
    mlp_norm: torch.Tensor      # [H]
    w_gate_up: Linear           # [2 I, H]: llama.fuse_gate_up's layout
    w_down: Linear              # [H, I]


def from_state_dict(config: ModelConfig, state: Dict[str, torch.Tensor],
                    device: torch.device, dtype: torch.dtype) -> Weights:
    """Fuse a Hugging Face-named state dict into Weights; consumes (empties) state."""
    read = StateReader(state, device, dtype)
    layers = []
    for i in range(config.num_layers):
        p = f'model.layers.{i}.'
        wqkv, bqkv = read.qkv(p, config.qkv_bias)
        layers.append(Layer(read.take(p + 'input_layernorm.weight'), wqkv, bqkv,
                            read.take(p + 'self_attn.q_norm.weight'),
                            read.take(p + 'self_attn.k_norm.weight'),
                            read.linear(p + 'self_attn.o_proj'),
                            read.take(p + 'post_attention_layernorm.weight'), read.gate_up(p),
                            read.linear(p + 'mlp.down_proj')))
    return finish(config, read, layers)


REUSES_PREFIX = True   # a prefill may start after a prefix the cache holds (llama's)


@torch.inference_mode()
def prompt_logits(w: Weights, cache: KVCache, ids: torch.Tensor, cos: torch.Tensor,
                  sin: torch.Tensor, last_only: bool = False, start: int = 0,
                  ops: PromptOps = TORCH_PROMPT) -> torch.Tensor:
    """Float32 logits [n, vocab] of each position of ids [n] from start (llama's)."""
    c = w.config
    n = ids.shape[0]
    dense, norm = ops.dense, ops.norm
    x = w.embed[ids].float()                                       # [n, H] residual
    cos_n, sin_n = cos[start:start + n], sin[start:start + n]
    for i, layer in enumerate(w.layers):
        qkv = F.linear(norm(x, layer.attn_norm, c.rms_norm_eps), dense(layer.wqkv), layer.bqkv)
        q, k, v = qkv.split([c.q_size, c.kv_size, c.kv_size], dim=-1)
        q = norm(q.view(n, c.num_heads, c.head_dim), layer.q_norm, c.rms_norm_eps)
        k = norm(k.view(n, c.num_kv_heads, c.head_dim), layer.k_norm, c.rms_norm_eps)
        attn = attend_prompt(c, cache, i, ops.rotate(q, cos_n, sin_n),
                             ops.rotate(k, cos_n, sin_n), v.view(n, c.num_kv_heads, c.head_dim),
                             start=start)
        x += F.linear(attn, dense(layer.wo))
        h = ops.gated(F.linear(norm(x, layer.mlp_norm, c.rms_norm_eps), dense(layer.w_gate_up)),
                      layer.w_gate_up, False)
        x += F.linear(h, dense(layer.w_down))
    hidden = norm(x[-1:] if last_only else x, w.norm, c.rms_norm_eps)
    return F.linear(hidden, w.lm_head).float()


def decode_layers(w: Weights, cache: KVCache, token: torch.Tensor, pos: torch.Tensor,
                  cos: torch.Tensor, sin: torch.Tensor, ops) -> torch.Tensor:
    """Every layer for token [1] at position pos [1] on the device (llama.decode_layers)."""
    c = w.config
    x = ops.embed(w.embed, token)                                  # [H] residual
    for i, layer in enumerate(w.layers):
        qkv = ops.rms_matvec(x, layer.attn_norm, layer.wqkv, layer.bqkv, c.rms_norm_eps)
        attn = ops.rope_attention(qkv, pos, cos, sin, cache.k[i], cache.v[i], c.num_heads,
                                  head_norms=(layer.q_norm, layer.k_norm, c.rms_norm_eps))
        ops.matvec_add(x, attn, layer.wo)                          # x += wo @ attn
        h = ops.rms_gate_up_silu(x, layer.mlp_norm, layer.w_gate_up, c.rms_norm_eps)
        ops.matvec_add(x, h, layer.w_down)                         # x += w_down @ h
    return x
