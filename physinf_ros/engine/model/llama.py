"""
Our own Llama-family forward: Llama 2/3.x, Mistral and Qwen2/2.5.

The other families' files (qwen3.py, smollm3.py, phi3.py, gemma3.py) build on its functions.

In the manner of gpt-fast's model.py: the weights as plain tensors (QKV and gate/up fused), a
static KV cache, and small pure functions; the config and tensor names are in config.py.
`prompt_logits` runs a prompt with PyTorch ops; `decode_one_token` is one batch-1 step written
against an `ops` module (kernels/ops_torch.py on the CPU, kernels/ops_triton.py on CUDA) so the
same step can be launched op by op or captured whole in a CUDA graph. The residual stream is
kept in float32 whatever the weight dtype.
"""

from dataclasses import dataclass
import math
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple, Union

import torch
from torch.nn.attention.bias import causal_lower_right
import torch.nn.functional as F

from .config import is_norm, ModelConfig, tensor_inventory
from ..base import StepFacts
from ..weights import gptq
from ..weights.gptq import dense, PackedLinear
from ..weights.source import quant_method, read_config

Linear = Union[torch.Tensor, PackedLinear]   # a float weight [N, K] or its 4-bit form


@dataclass
class Layer:
    """One decoder layer's weights, fused as the step reads them (linears: float or 4-bit)."""

    attn_norm: torch.Tensor     # [H]
    wqkv: Linear                # [q + 2 kv, H]
    bqkv: Optional[torch.Tensor]
    wo: Linear                  # [H, q]
    mlp_norm: torch.Tensor      # [H]
    w_gate_up: Linear           # [2 I, H]: fuse_gate_up's layout
    w_down: Linear              # [H, I]


@dataclass
class Weights:
    """All weights of a model; lm_head is the embedding itself when tied."""

    config: ModelConfig
    embed: torch.Tensor         # [V, H]
    layers: List[Layer]
    norm: torch.Tensor          # [H]
    lm_head: torch.Tensor       # [V, H]

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.dtype

    def step_facts(self) -> StepFacts:
        """Return what a step reads: 16/32-bit tensors, and the 4-bit linears' groups if packed."""
        element = self.embed.element_size()   # the KV cache is held in the same dtype
        packed = self.layers[0].wqkv
        if not isinstance(packed, PackedLinear):
            return StepFacts(self.config, element, element)
        # Our kernels read uint8 zeros, or none when the checkpoint is symmetric.
        return StepFacts(self.config, element, element, packed.group_size,
                         0.0 if packed.zeros is None else 1.0)


# A dense gate/up linear holds its rows in blocks: GATE_UP_BLOCK gate rows, then the same up rows.
# A GEMV program then reads its rows of both as one contiguous span: -0.85 us a launch on the 8B
# (docs/PERF.md, v28). 4-bit linears keep [gate; up], the layout their kernels read.
GATE_UP_BLOCK = 8


def gate_up_block(intermediate: int) -> int:
    """Return the rows of gate (and of up) a block of a dense gate/up linear holds."""
    return math.gcd(intermediate, GATE_UP_BLOCK)


def fuse_gate_up(gate: Linear, up: Linear) -> Linear:
    """Return gate [I, H] and up [I, H] as one linear [2 I, H], dense ones in blocks."""
    if isinstance(gate, PackedLinear):
        return PackedLinear.cat([gate, up])
    i, h = gate.shape
    b = gate_up_block(i)
    return torch.stack([gate.view(i // b, b, h), up.view(i // b, b, h)], dim=1).view(2 * i, h)


def silu_gate_up(y: torch.Tensor, w_gate_up: Linear) -> torch.Tensor:
    """Return silu(gate) * up [..., I] in y's dtype, for y = x @ w_gate_up.T [..., 2 I]."""
    if isinstance(w_gate_up, PackedLinear):
        gate, up = y.chunk(2, dim=-1)
        return F.silu(gate) * up
    i = y.shape[-1] // 2
    b = gate_up_block(i)
    # The product of the blocks' views is contiguous: neither half is copied out first.
    blocks = y.unflatten(-1, (i // b, 2, b))
    return (F.silu(blocks[..., 0, :]) * blocks[..., 1, :]).flatten(-2)


def gelu_gate_up(y: torch.Tensor, w_gate_up: Linear) -> torch.Tensor:
    """Return gelu_tanh(gate) * up [..., I] (GeGLU, Gemma 3) for y = x @ w_gate_up.T [..., 2 I]."""
    if isinstance(w_gate_up, PackedLinear):
        gate, up = y.chunk(2, dim=-1)
        return F.gelu(gate, approximate='tanh') * up
    i = y.shape[-1] // 2
    b = gate_up_block(i)
    blocks = y.unflatten(-1, (i // b, 2, b))
    return (F.gelu(blocks[..., 0, :], approximate='tanh') * blocks[..., 1, :]).flatten(-2)


class StateReader:
    """Takes tensors out of a Hugging Face-named state dict onto the device, linears as stored."""

    def __init__(self, state: Dict[str, torch.Tensor], device: torch.device,
                 dtype: torch.dtype):
        self.state, self.device, self.dtype = state, device, dtype

    def take(self, name: str) -> torch.Tensor:
        return self.state.pop(name).to(device=self.device, dtype=self.dtype)

    def linear(self, name: str) -> Linear:
        """Take a float weight, or the qweight, qzeros and scales of a GPTQ one as PackedLinear."""
        state = self.state
        if name + '.qweight' not in state:
            return self.take(name + '.weight')
        return PackedLinear.from_gptq(
            state.pop(name + '.qweight'), state.pop(name + '.qzeros'), state.pop(name + '.scales'),
            state.pop(name + '.g_idx', None), self.dtype, self.device)

    def qkv(self, prefix: str, biased: bool) -> Tuple[Linear, Optional[torch.Tensor]]:
        """Take the fused QKV linear of layer prefix and, if biased, its bias (else None)."""
        parts = [self.linear(prefix + f'self_attn.{x}_proj') for x in 'qkv']
        wqkv = PackedLinear.cat(parts) if isinstance(parts[0], PackedLinear) else torch.cat(parts)
        if not biased:
            return wqkv, None
        return wqkv, torch.cat([self.take(prefix + f'self_attn.{x}_proj.bias') for x in 'qkv'])

    def gate_up(self, prefix: str) -> Linear:
        return fuse_gate_up(self.linear(prefix + 'mlp.gate_proj'),
                            self.linear(prefix + 'mlp.up_proj'))


def from_state_dict(config: ModelConfig, state: Dict[str, torch.Tensor],
                    device: torch.device, dtype: torch.dtype) -> Weights:
    """
    Fuse a Hugging Face-named state dict into Weights; consumes (empties) state.

    GPTQ linears (``.qweight``, ``.qzeros``, ``.scales``) stay 4-bit, repacked as PackedLinear.
    """
    read = StateReader(state, device, dtype)
    layers = []
    for i in range(config.num_layers):
        p = f'model.layers.{i}.'
        wqkv, bqkv = read.qkv(p, config.qkv_bias)
        layers.append(Layer(read.take(p + 'input_layernorm.weight'), wqkv, bqkv,
                            read.linear(p + 'self_attn.o_proj'),
                            read.take(p + 'post_attention_layernorm.weight'), read.gate_up(p),
                            read.linear(p + 'mlp.down_proj')))
    return finish(config, read, layers)


def finish(config: ModelConfig, read: StateReader, layers: list) -> Weights:
    """Weights of the layers and the state's embedding, final norm and lm_head."""
    embed = read.take('model.embed_tokens.weight')
    lm_head = embed if config.tie_word_embeddings else read.take('lm_head.weight')
    return Weights(config, embed, layers, read.take('model.norm.weight'), lm_head)


def read_state(path: Path) -> Dict[str, torch.Tensor]:
    """Every tensor of a directory's *.safetensors files, by name, on the CPU."""
    from safetensors import safe_open
    files = sorted(Path(path).glob('*.safetensors'))
    if not files:
        raise FileNotFoundError(f'{path} holds no *.safetensors weights')
    state = {}
    for file in files:
        with safe_open(str(file), framework='pt', device='cpu') as f:
            for name in f.keys():
                state[name] = f.get_tensor(name)
    return state


def read_checkpoint(path: Path, packed: bool = True, hf: Optional[dict] = None
                    ) -> Tuple[ModelConfig, Dict[str, torch.Tensor]]:
    """
    Read the config and state dict of a Hugging Face directory (hf: its parsed config.json).

    A GPTQ checkpoint keeps its 4-bit linears (packed=True: the kernels read the codes), or is
    dequantised to float once here (packed=False: the ordinary float forward on the same
    values, which is the fast path on a CPU, where nothing streams 4-bit weights).
    """
    if hf is None:
        hf = read_config(Path(path) / 'config.json')
    method = quant_method(hf)
    if method is not None and gptq.GptqSpec.from_hf(hf) is None:
        raise ValueError(f'{method} checkpoints run only on backend exllamav2 (CUDA)')
    config = ModelConfig.from_hf(hf)
    state = read_state(path)
    if method is not None and not packed:
        gptq.dequantize_state(state)
    if config.tie_word_embeddings:
        state.pop('lm_head.weight', None)
    return config, state


def load_hf_dir(path: Path, device: torch.device, dtype: torch.dtype,
                packed: bool = True, hf: Optional[dict] = None) -> Weights:
    """Weights from a Hugging Face directory of safetensors files (see read_checkpoint)."""
    config, state = read_checkpoint(path, packed, hf)
    return from_state_dict(config, state, device, dtype)


def synthetic_state_dict(config: ModelConfig, device: torch.device, dtype: torch.dtype,
                         seed: int = 0) -> Dict[str, torch.Tensor]:
    """
    Random weights of the config's shape, named as Hugging Face names them.

    Normal(0, 0.02) like transformers' initialisation, norms scaling by 1: activations stay
    finite and the step reads exactly the bytes a real checkpoint of this shape would.
    """
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    state = {}
    for name, shape in tensor_inventory(config):
        state[name] = torch.empty(shape, device=device, dtype=dtype)
        if is_norm(name):
            state[name].fill_(1.0 - config.norm_offset)
        else:
            state[name].normal_(0.0, 0.02, generator=gen)
    return state


def inverse_frequencies(dim: int, theta: float, scaling: Optional[tuple] = None,
                        long: bool = False) -> torch.Tensor:
    """
    Return RoPE's inverse frequencies [dim / 2] in float32, as modeling_rope_utils has them.

    scaling: llama3 (stretch the low frequencies), linear (divide by the factor) or longrope
    (divide by the short factors, or by the long ones when long).
    """
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float32)
                                / dim))
    s = dict(scaling or ())
    kind = s.get('rope_type', 'llama3')
    if not s:
        return inv_freq
    if kind == 'linear':
        return inv_freq / s['factor']
    if kind == 'longrope':
        factors = s['long_factor'] if long else s['short_factor']
        return inv_freq / torch.tensor(factors, dtype=torch.float32)
    # Llama 3.1: stretch low frequencies by `factor`, keep high ones, blend in between.
    factor, low, high = s['factor'], s['low_freq_factor'], s['high_freq_factor']
    old_len = s['original_max_position_embeddings']
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return torch.where(medium, blended, scaled)


def table(config: ModelConfig, inv_freq: torch.Tensor, positions: torch.Tensor,
          device: torch.device, attention_factor: float = 1.0):
    """
    Rotary tables cos, sin [positions, head_dim / 2] in float32 for inv_freq [rotary_dim / 2].

    Columns past rotary_dim / 2 rotate nothing (cos 1, sin 0): the dimensions a partial rotary
    leaves alone (phi3.py lays the heads out so), or every one on a layer without RoPE.
    """
    angles = torch.outer(positions.to(torch.float32), inv_freq)
    cos = torch.ones(len(positions), config.head_dim // 2)
    sin = torch.zeros(len(positions), config.head_dim // 2)
    cos[:, :len(inv_freq)] = angles.cos() * attention_factor
    sin[:, :len(inv_freq)] = angles.sin() * attention_factor
    return cos.to(device), sin.to(device)


def rope_tables(config: ModelConfig, max_context: int, device: torch.device):
    """Rotary tables cos, sin [max_context, head_dim / 2] in float32, llama3 scaling applied."""
    inv_freq = inverse_frequencies(config.head_dim, config.rope_theta, config.rope_scaling)
    return table(config, inv_freq, torch.arange(max_context), device)


@dataclass
class KVCache:
    """Static cache: keys and values [layers, kv_heads, max_context, head_dim]."""

    k: torch.Tensor
    v: torch.Tensor

    @classmethod
    def allocate(cls, config: ModelConfig, max_context: int, device: torch.device,
                 dtype: torch.dtype) -> 'KVCache':
        shape = (config.num_layers, config.num_kv_heads, max_context, config.head_dim)
        return cls(torch.zeros(shape, device=device, dtype=dtype),
                   torch.zeros(shape, device=device, dtype=dtype))

    @property
    def max_context(self) -> int:
        return self.k.shape[2]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Normalise by the root mean square as transformers does: in float32, scale after."""
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(weight.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # Rotate-half convention: pairs (i, i + head_dim / 2).
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


def norm_to(x: torch.Tensor, weight: torch.Tensor, eps: float,
            dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """Return rms_norm(x, weight, eps), in dtype where given (Gemma 3's float32 weights)."""
    y = rms_norm(x, weight, eps)
    return y if dtype is None else y.to(dtype)


def rotate_heads(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Return heads x [n, heads, D] rotated by RoPE's rows cos, sin [n, D / 2], in x's dtype."""
    return _rotate(x, cos[:, None], sin[:, None])


def gated(y: torch.Tensor, w_gate_up: Linear, gelu: bool) -> torch.Tensor:
    """Return act(gate) * up of y = x @ w_gate_up.T: GeGLU where gelu, else SwiGLU."""
    return gelu_gate_up(y, w_gate_up) if gelu else silu_gate_up(y, w_gate_up)


@dataclass(frozen=True)
class PromptOps:
    """
    How a prompt's forward does its work besides the matrix products.

    These PyTorch functions on any device, or on CUDA ops_triton's fused kernels of the same
    contract (KernelOps.prompt: one kernel for each, where these take several passes over the
    prompt's rows).
    """

    dense: Callable = dense            # a 4-bit linear as its float weight (gptq.dense)
    norm: Callable = norm_to           # (x, weight, eps, dtype=None)
    rotate: Callable = rotate_heads    # (x [n, heads, D], cos [n, D / 2], sin [n, D / 2])
    gated: Callable = gated            # (y, w_gate_up, gelu)


TORCH_PROMPT = PromptOps()


# Prefix reuse (a prefill from start > 0 over a cache that holds the sequence's first start
# tokens) is exact for this family and those built on its prompt path.
REUSES_PREFIX = True


@torch.inference_mode()
def prompt_logits(w: Weights, cache: KVCache, ids: torch.Tensor, cos: torch.Tensor,
                  sin: torch.Tensor, last_only: bool = False, start: int = 0,
                  ops: PromptOps = TORCH_PROMPT) -> torch.Tensor:
    """
    Run ids [n] from position start and fill the cache; float32 logits [n, vocab] of each.

    Each row is the prediction for the next token (teacher forcing); last_only keeps one row.
    The cache's first start positions must hold this sequence's earlier tokens (a reused
    prefix): the new tokens attend to them and to each other. ops does the work besides the
    matrix products and makes a 4-bit linear a float weight (TORCH_PROMPT's PyTorch functions;
    on CUDA the decoder passes its kernels', KernelOps.prompt).
    """
    return prompt_logits_by_layer(w, cache, ids, [(cos, sin)] * len(w.layers), last_only,
                                  start, ops)


def attend_prompt(c: ModelConfig, cache: KVCache, i: int, q: torch.Tensor, k: torch.Tensor,
                  v: torch.Tensor, mask: Optional[torch.Tensor] = None,
                  start: int = 0) -> torch.Tensor:
    """
    Store layer i's k, v [n, KVH, D] at positions start.. and attend q [n, Hq, D] causally.

    The queries see the cache's first start positions too (a reused prefix). mask [n, start + n]
    (True: attend) replaces the causal one, e.g. a sliding window's. Returns the attention
    output [n, Hq * D].
    """
    n = q.shape[0]
    end = start + n
    cache.k[i, :, start:end] = k.transpose(0, 1)
    cache.v[i, :, start:end] = v.transpose(0, 1)
    if mask is None and start > 0:
        # The causal mask aligned to the keys' end, which SDPA runs without materialising it.
        mask = causal_lower_right(n, end)
    # Prefill runs once per prompt: expanding the kv heads keeps SDPA on its flash path at
    # long prompts (decode never copies them: its kernel indexes the groups).
    group = c.num_heads // c.num_kv_heads
    attn = F.scaled_dot_product_attention(
        q.transpose(0, 1)[None], cache.k[i, :, :end].repeat_interleave(group, 0)[None],
        cache.v[i, :, :end].repeat_interleave(group, 0)[None], attn_mask=mask,
        is_causal=mask is None, scale=c.attention_scale)[0]
    return attn.transpose(0, 1).reshape(n, c.q_size)


def prompt_logits_by_layer(w: Weights, cache: KVCache, ids: torch.Tensor, tables: list,
                           last_only: bool = False, start: int = 0,
                           ops: PromptOps = TORCH_PROMPT) -> torch.Tensor:
    """prompt_logits with layer i's rotary tables cos, sin [T, head_dim / 2] in tables[i]."""
    c = w.config
    n = ids.shape[0]
    end = start + n
    dense = ops.dense
    x = w.embed[ids].float()                                       # [n, H] residual
    for i, layer in enumerate(w.layers):
        cos, sin = tables[i]
        cos_n, sin_n = cos[start:end], sin[start:end]
        qkv = F.linear(ops.norm(x, layer.attn_norm, c.rms_norm_eps), dense(layer.wqkv),
                       layer.bqkv)
        q, k, v = qkv.split([c.q_size, c.kv_size, c.kv_size], dim=-1)
        q = ops.rotate(q.view(n, c.num_heads, c.head_dim), cos_n, sin_n)
        k = ops.rotate(k.view(n, c.num_kv_heads, c.head_dim), cos_n, sin_n)
        attn = attend_prompt(c, cache, i, q, k, v.view(n, c.num_kv_heads, c.head_dim),
                             start=start)
        x += F.linear(attn, dense(layer.wo))   # in place: one pass, where + .float() took two
        h = ops.gated(F.linear(ops.norm(x, layer.mlp_norm, c.rms_norm_eps),
                               dense(layer.w_gate_up)), layer.w_gate_up, False)
        x += F.linear(h, dense(layer.w_down))
    hidden = ops.norm(x[-1:] if last_only else x, w.norm, c.rms_norm_eps)
    return F.linear(hidden, w.lm_head).float()


def decode_layers(w: Weights, cache: KVCache, token: torch.Tensor, pos: torch.Tensor,
                  cos: torch.Tensor, sin: torch.Tensor, ops) -> torch.Tensor:
    """
    Run every layer for token [1] (long) at position pos [1] (int32), both on the device.

    Writes this token's keys and values into the cache and returns the float32 residual [H]
    (before the final norm). Nothing here reads a device value on the host, so the step can be
    captured in a graph.
    """
    return decode_layers_by_table(w, cache, token, pos, [(cos, sin)] * len(w.layers), ops)


def decode_layers_by_table(w: Weights, cache: KVCache, token: torch.Tensor, pos: torch.Tensor,
                           tables: list, ops) -> torch.Tensor:
    """decode_layers with layer i's rotary tables in tables[i]."""
    c = w.config
    x = ops.embed(w.embed, token)                                  # [H] residual
    for i, layer in enumerate(w.layers):
        cos, sin = tables[i]
        qkv = ops.rms_matvec(x, layer.attn_norm, layer.wqkv, layer.bqkv, c.rms_norm_eps)
        # RoPE on q and k, k and v stored at pos, attention over 0..pos.
        attn = ops.rope_attention(qkv, pos, cos, sin, cache.k[i], cache.v[i], c.num_heads)
        ops.matvec_add(x, attn, layer.wo)                          # x += wo @ attn
        h = ops.rms_gate_up_silu(x, layer.mlp_norm, layer.w_gate_up, c.rms_norm_eps)
        ops.matvec_add(x, h, layer.w_down)                         # x += w_down @ h
    return x


def decode_one_token(w: Weights, cache: KVCache, token: torch.Tensor, pos: torch.Tensor,
                     cos: torch.Tensor, sin: torch.Tensor, ops) -> torch.Tensor:
    """One decode step (see decode_layers); returns float32 logits [vocab]."""
    x = decode_layers(w, cache, token, pos, cos, sin, ops)
    return ops.rms_matvec(x, w.norm, w.lm_head, None, w.config.rms_norm_eps)
