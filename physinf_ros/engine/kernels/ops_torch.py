"""
The decode step's operations in plain PyTorch: the CPU path and the kernels' reference.

Each function has a twin of the same signature in ops_triton.py (Triton, CUDA). Activations are
float32 vectors; weights and the KV cache are in the model dtype (a 4-bit PackedLinear is
dequantised on every call: a reference, not a fast path).
"""

from typing import Optional, Tuple

import torch

from ..model.llama import PromptOps, rms_norm, TORCH_PROMPT
from ..sampling import mask_logits

# A family's q and k head norms for rope_attention: (q_norm, k_norm, eps).
HeadNorms = Tuple[torch.Tensor, torch.Tensor, float]


def embed_rows(table: torch.Tensor, token: torch.Tensor,
               scale: Optional[float] = None) -> torch.Tensor:
    """
    Return table's rows for tokens [n] as float32 [n, H].

    scale multiplies the rows in the table's dtype first (Gemma 3's scaled embedding).
    """
    rows = table.index_select(0, token)
    return (rows if scale is None else rows * scale).float()


def embed(table: torch.Tensor, token: torch.Tensor,
          scale: Optional[float] = None) -> torch.Tensor:
    """Return table's row for token [1] (on the device) as float32 [H]: the step's residual."""
    return embed_rows(table, token, scale).view(-1)


def rms_matvec(x: torch.Tensor, norm_w: torch.Tensor, w: torch.Tensor,
               bias: Optional[torch.Tensor], eps: float,
               out: Optional[torch.Tensor] = None,
               prompt: PromptOps = TORCH_PROMPT) -> torch.Tensor:
    """
    Return w @ rms_norm(x) (+ bias) as float32 [N], into out when given.

    prompt does the work besides the matrix product here and below, and makes a 4-bit linear a
    float weight (ops_triton passes its kernels', ops_triton.PROMPT, for a prompt's rows).
    """
    w = prompt.dense(w)
    y = torch.nn.functional.linear(prompt.norm(x, norm_w, eps, w.dtype), w, bias).float()
    return y if out is None else out.copy_(y)


def greedy_head(x: torch.Tensor, norm_w: torch.Tensor, w: torch.Tensor, eps: float,
                logits: torch.Tensor, token: torch.Tensor, pos: torch.Tensor,
                host_out: torch.Tensor) -> None:
    """Write the logits, their argmax into token and host_out's row pos % rows; advance pos."""
    rms_matvec(x, norm_w, w, None, eps, out=logits)
    torch.argmax(logits, dim=0, keepdim=True, out=token)
    step_end(token, pos, host_out)
    pos.add_(1)


def masked_greedy_end(logits: torch.Tensor, bits: torch.Tensor, token: torch.Tensor,
                      pos: torch.Tensor, host_out: torch.Tensor) -> None:
    """Write the argmax of the logits bits allows into token and host_out's row; advance pos."""
    torch.argmax(mask_logits(logits, bits), dim=0, keepdim=True, out=token)
    step_end(token, pos, host_out)
    pos.add_(1)


def step_end(token: torch.Tensor, pos: torch.Tensor, host_out: torch.Tensor) -> None:
    """
    Write token into host_out's row pos % rows: a step's reply to the host.

    The kernels also write the step's device time beside it; steps on these ops are timed on
    the host (a CPU computes as it launches), so that column is left as it is.
    """
    host_out[int(pos) % host_out.shape[0], 0] = token[0]


def rms_gate_up_silu(x: torch.Tensor, norm_w: torch.Tensor, w_gate_up: torch.Tensor,
                     eps: float, prompt: PromptOps = TORCH_PROMPT) -> torch.Tensor:
    """Return silu(gate) * up for gate, up = w_gate_up @ rms_norm(x), float32 [I]."""
    return _gate_up(x, norm_w, w_gate_up, eps, False, prompt)


def _gate_up(x, norm_w, w_gate_up, eps, gelu, prompt):
    w = prompt.dense(w_gate_up)
    y = torch.nn.functional.linear(prompt.norm(x, norm_w, eps, w.dtype), w)
    return prompt.gated(y, w_gate_up, gelu).float()


def head_norm(qkv: torch.Tensor, q_norm: torch.Tensor, k_norm: torch.Tensor, num_heads: int,
              eps: float) -> None:
    """
    Normalise each q and k head of qkv [(Hq + 2 Hkv) D] in place (RMSNorm by q_norm, k_norm).

    The heads are rounded to the norm weight's dtype first, as transformers norms the q and k
    projections' outputs (Qwen3, Gemma 3). qkv [n, (Hq + 2 Hkv) D] normalises each row.
    """
    dim = q_norm.shape[0]
    q_end = num_heads * dim
    k_end = q_end + (qkv.shape[-1] - q_end) // 2
    lead = qkv.shape[:-1]
    q = qkv[..., :q_end].reshape(*lead, -1, dim).to(q_norm.dtype)
    k = qkv[..., q_end:k_end].reshape(*lead, -1, dim).to(k_norm.dtype)
    qkv[..., :q_end] = rms_norm(q, q_norm, eps).float().flatten(-2)
    qkv[..., q_end:k_end] = rms_norm(k, k_norm, eps).float().flatten(-2)


def rms_gate_up_gelu(x: torch.Tensor, norm_w: torch.Tensor, w_gate_up: torch.Tensor,
                     eps: float, prompt: PromptOps = TORCH_PROMPT) -> torch.Tensor:
    """Return gelu_tanh(gate) * up for gate, up = w_gate_up @ rms_norm(x), float32 [I]."""
    return _gate_up(x, norm_w, w_gate_up, eps, True, prompt)


def matvec_norm_add(x: torch.Tensor, a: torch.Tensor, w: torch.Tensor, norm_w: torch.Tensor,
                    eps: float, prompt: PromptOps = TORCH_PROMPT) -> None:
    """Add rms_norm(w @ a) into x in place: Gemma 3's residual, normed after the sublayer."""
    w = prompt.dense(w)
    y = torch.nn.functional.linear(a.to(w.dtype), w)
    x += prompt.norm(y, norm_w, eps, w.dtype)   # rounded to the model dtype, added in float32


def matvec_add(x: torch.Tensor, a: torch.Tensor, w: torch.Tensor,
               prompt: PromptOps = TORCH_PROMPT) -> None:
    """Add w @ a into x in place (the residual connection)."""
    x += torch.nn.functional.linear(a.to(w.dtype), prompt.dense(w)).float()


def _rope_and_cache(qkv: torch.Tensor, pos: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                    k_cache: torch.Tensor, v_cache: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Rotate q and k for position pos, store k and v at pos; return q [Hq, D] (float32)."""
    kv_heads, _, dim = k_cache.shape
    q, k, v = qkv.split([num_heads * dim, kv_heads * dim, kv_heads * dim])
    c, s = cos[pos.long()], sin[pos.long()]                       # [1, D/2]

    def rotate(t):
        t1, t2 = t.to(k_cache.dtype).float().chunk(2, dim=-1)
        return torch.cat([t1 * c - t2 * s, t2 * c + t1 * s], dim=-1)

    index = pos.long()
    k_cache.index_copy_(1, index, rotate(k.view(kv_heads, dim)).to(k_cache.dtype)[:, None])
    v_cache.index_copy_(1, index, v.view(kv_heads, 1, dim).to(v_cache.dtype))
    return rotate(q.view(num_heads, dim))


def _decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                      pos: torch.Tensor, scale: Optional[float] = None,
                      window: int = 0) -> torch.Tensor:
    """Attend q [Hq, D] over cache positions 0..pos with GQA; return float32 [Hq * D]."""
    kv_heads, _, dim = k_cache.shape
    length = int(pos) + 1  # host read: fine on the CPU path, which is never graph-captured
    first = max(length - window, 0) if window else 0
    group = q.shape[0] // kv_heads
    k = k_cache[:, first:length]                                   # [KVH, T, D]
    v = v_cache[:, first:length]
    qg = q.view(kv_heads, group, dim).to(k.dtype)
    scale = dim ** -0.5 if scale is None else scale
    scores = torch.matmul(qg, k.transpose(1, 2)).float() * scale   # [KVH, G, T]
    probs = torch.softmax(scores, dim=-1).to(v.dtype)
    return torch.matmul(probs, v).float().reshape(-1)


def rope_attention(qkv: torch.Tensor, pos: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                   k_cache: torch.Tensor, v_cache: torch.Tensor, num_heads: int,
                   scale: Optional[float] = None, window: int = 0,
                   head_norms: Optional[HeadNorms] = None) -> torch.Tensor:
    """
    Rotate q and k for position pos, store k and v at pos, attend over 0..pos with GQA.

    qkv is the QKV GEMV's output [(Hq + 2 Hkv) D]; returns float32 [Hq * D]. Scores are scaled
    by scale (1 / sqrt(D) unless given); window > 0 attends to the last window positions only.
    head_norms (q_norm, k_norm, eps) RMS-norms each q and k head first (head_norm, in place).
    """
    if head_norms is not None:
        q_norm, k_norm, eps = head_norms
        head_norm(qkv, q_norm, k_norm, num_heads, eps)
    q = _rope_and_cache(qkv, pos, cos, sin, k_cache, v_cache, num_heads)
    return _decode_attention(q, k_cache, v_cache, pos, scale, window)


def rows_rope_attention(qkv: torch.Tensor, pos: torch.Tensor, cos: torch.Tensor,
                        sin: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                        num_heads: int, scale: Optional[float] = None,
                        window: int = 0) -> torch.Tensor:
    """rope_attention for rows qkv [n, (Hq + 2 Hkv) D] at positions pos [n], row by row."""
    return torch.stack([rope_attention(row, pos[j:j + 1], cos, sin, k_cache, v_cache, num_heads,
                                       scale, window) for j, row in enumerate(qkv)])


# Rows [n, K] through the same functions (a verify step's, kernels/rows.py): each is a matrix
# product over the rows, which reads each weight once for all of them.
rows_rms_matvec = rms_matvec
rows_gate_up_silu = rms_gate_up_silu
rows_gate_up_gelu = rms_gate_up_gelu
rows_matvec_add = matvec_add
rows_matvec_norm_add = matvec_norm_add
# A long prompt's forward besides its matrix products: llama's PyTorch functions.
prompt = TORCH_PROMPT
