"""
Gemma 3's forward (270M, 1B, 4B; `gemma3_text`, and the language model of `gemma3`).

What differs from llama.py, after transformers' modeling_gemma3.py: the embedding scaled by
sqrt(hidden) in the embedding dtype; every norm scales by (1 + weight), held here in float32
as that sum; four norms a layer (before and after attention, before and after the MLP, the
"after" ones on the sublayer's output before the residual add); RMSNorm of each q and k head;
scores scaled by 1/sqrt(query_pre_attn_scalar); GeGLU (gelu's tanh form); and layers of two
kinds: sliding-window layers that attend to their last sliding_window positions with RoPE of
base rope_local_base_freq, and global layers with rope_theta and its scaling (linear on 4B).
The KV cache holds every position for both kinds (static shapes; the sliding layers read only
their window of it).
"""

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

from .config import ModelConfig
from .llama import (attend_prompt, inverse_frequencies, KVCache, Linear, PromptOps, StateReader,
                    table, TORCH_PROMPT, Weights)

__all__ = ['decode_layers', 'from_state_dict', 'KVCache', 'prompt_logits',
           'rope_tables']

LOCAL, GLOBAL = 0, 1   # rows of rope_tables
# Where the multimodal checkpoint (`gemma3`) keeps its language model: transformers 5, then 4.
MULTIMODAL_PREFIXES = (('model.language_model.', 'model.'), ('language_model.model.', 'model.'),
                       ('language_model.lm_head.', 'lm_head.'), ('lm_head.', 'lm_head.'))


@dataclass
class Layer:
    """One Gemma 3 layer; norms are float32 (1 + weight)."""

    attn_norm: torch.Tensor     # [H] before attention
    wqkv: Linear                # [q + 2 kv, H]
    bqkv: Optional[torch.Tensor]  # where attention_bias is set
    q_norm: torch.Tensor        # [head_dim]
    k_norm: torch.Tensor        # [head_dim]
    wo: Linear                  # [H, q]
    post_attn_norm: torch.Tensor  # [H] on attention's output
    mlp_norm: torch.Tensor      # [H] before the MLP
    w_gate_up: Linear           # [2 I, H]: llama.fuse_gate_up's layout
    w_down: Linear              # [H, I]
    post_mlp_norm: torch.Tensor   # [H] on the MLP's output


def language_model_state(state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """
    Rename a multimodal checkpoint's language-model tensors as gemma3_text names them.

    The vision tower and projector are left out; a text checkpoint is returned as it is.
    """
    if not any(name.startswith(MULTIMODAL_PREFIXES[0][0]) or name.startswith(
            MULTIMODAL_PREFIXES[1][0]) for name in state):
        return state
    renamed = {}
    for name, tensor in state.items():
        for prefix, text_prefix in MULTIMODAL_PREFIXES:
            if name.startswith(prefix):
                renamed[text_prefix + name[len(prefix):]] = tensor
                break
    return renamed


def from_state_dict(config: ModelConfig, state: Dict[str, torch.Tensor],
                    device: torch.device, dtype: torch.dtype) -> Weights:
    """Fuse a Hugging Face-named state dict into Weights; consumes (empties) state."""
    state = language_model_state(state)
    read = StateReader(state, device, dtype)

    def norm(name):   # (1 + weight) in float32, as Gemma3RMSNorm computes it
        return state.pop(name).to(device=device, dtype=torch.float32) + 1.0

    layers = []
    for i in range(config.num_layers):
        p = f'model.layers.{i}.'
        wqkv, bqkv = read.qkv(p, config.qkv_bias)
        layers.append(Layer(
            norm(p + 'input_layernorm.weight'), wqkv, bqkv, norm(p + 'self_attn.q_norm.weight'),
            norm(p + 'self_attn.k_norm.weight'), read.linear(p + 'self_attn.o_proj'),
            norm(p + 'post_attention_layernorm.weight'),
            norm(p + 'pre_feedforward_layernorm.weight'), read.gate_up(p),
            read.linear(p + 'mlp.down_proj'), norm(p + 'post_feedforward_layernorm.weight')))
    embed = read.take('model.embed_tokens.weight')
    lm_head = embed if config.tie_word_embeddings else read.take('lm_head.weight')
    return Weights(config, embed, layers, norm('model.norm.weight'), lm_head)


def rope_tables(config: ModelConfig, max_context: int, device: torch.device):
    """Tables cos, sin [2, max_context, head_dim / 2]: the sliding layers', the global ones'."""
    positions = torch.arange(max_context)
    dim = config.head_dim
    local = table(config, inverse_frequencies(dim, config.local_rope_theta), positions, device)
    whole = table(config, inverse_frequencies(dim, config.rope_theta, config.rope_scaling),
                  positions, device)
    return torch.stack([local[0], whole[0]]), torch.stack([local[1], whole[1]])


def layer_kinds(config: ModelConfig) -> List[Tuple[int, int]]:
    """Each layer's rope table row and window (0: a global layer, which attends to all)."""
    return [(LOCAL, config.sliding_window) if i in config.sliding_layers else (GLOBAL, 0)
            for i in range(config.num_layers)]


def embed_scale(config: ModelConfig, dtype: torch.dtype) -> float:
    """Return sqrt(hidden) rounded to dtype, as Gemma3TextScaledWordEmbedding multiplies by it."""
    return float(torch.tensor(config.hidden_size ** 0.5).to(dtype))


REUSES_PREFIX = True   # a prefill may start after a prefix the cache holds (llama's)


@torch.inference_mode()
def prompt_logits(w: Weights, cache: KVCache, ids: torch.Tensor, cos: torch.Tensor,
                  sin: torch.Tensor, last_only: bool = False, start: int = 0,
                  ops: PromptOps = TORCH_PROMPT) -> torch.Tensor:
    """Float32 logits [n, vocab] of each position of ids [n] from start (llama's)."""
    c = w.config
    n = ids.shape[0]
    end = start + n
    dtype = w.embed.dtype
    dense = ops.dense

    def norm(x, weight):   # float32 (1 + weight), the product rounded to the model dtype
        return ops.norm(x, weight, c.rms_norm_eps, dtype)

    x = (w.embed[ids] * embed_scale(c, dtype)).float()            # [n, H] residual
    row = torch.arange(start, end, device=ids.device)[:, None]     # the queries' positions
    key = torch.arange(end, device=ids.device)[None, :]
    sliding = (key <= row) & (key > row - c.sliding_window)
    for i, (layer, (kind, window)) in enumerate(zip(w.layers, layer_kinds(c))):
        cos_n, sin_n = cos[kind, start:end], sin[kind, start:end]
        qkv = F.linear(norm(x, layer.attn_norm), dense(layer.wqkv), layer.bqkv)
        q, k, v = qkv.split([c.q_size, c.kv_size, c.kv_size], dim=-1)
        q = norm(q.view(n, c.num_heads, c.head_dim), layer.q_norm)
        k = norm(k.view(n, c.num_kv_heads, c.head_dim), layer.k_norm)
        attn = attend_prompt(c, cache, i, ops.rotate(q, cos_n, sin_n),
                             ops.rotate(k, cos_n, sin_n), v.view(n, c.num_kv_heads, c.head_dim),
                             sliding if window else None, start)
        x += norm(F.linear(attn, dense(layer.wo)), layer.post_attn_norm)
        h = ops.gated(F.linear(norm(x, layer.mlp_norm), dense(layer.w_gate_up)),
                      layer.w_gate_up, True)
        x += norm(F.linear(h, dense(layer.w_down)), layer.post_mlp_norm)
    hidden = norm(x[-1:] if last_only else x, w.norm)
    return F.linear(hidden, w.lm_head).float()


def decode_layers(w: Weights, cache: KVCache, token: torch.Tensor, pos: torch.Tensor,
                  cos: torch.Tensor, sin: torch.Tensor, ops) -> torch.Tensor:
    """Every layer for token [1] at position pos [1] on the device (llama.decode_layers)."""
    c = w.config
    eps = c.rms_norm_eps
    x = ops.embed(w.embed, token, embed_scale(c, w.embed.dtype))   # [H] residual
    for i, (layer, (kind, window)) in enumerate(zip(w.layers, layer_kinds(c))):
        qkv = ops.rms_matvec(x, layer.attn_norm, layer.wqkv, layer.bqkv, eps)
        attn = ops.rope_attention(qkv, pos, cos[kind], sin[kind], cache.k[i], cache.v[i],
                                  c.num_heads, c.attention_scale, window,
                                  (layer.q_norm, layer.k_norm, eps))
        ops.matvec_norm_add(x, attn, layer.wo, layer.post_attn_norm, eps)
        h = ops.rms_gate_up_gelu(x, layer.mlp_norm, layer.w_gate_up, eps)
        ops.matvec_norm_add(x, h, layer.w_down, layer.post_mlp_norm, eps)
    return x
