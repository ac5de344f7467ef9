"""
The decode step's operations over n rows: tokens [n] at positions pos [n], one forward.

RowOps wraps an ops module (ops_torch or ops_triton's KernelOps) so that a family's
decode_layers, unchanged, runs a speculative verify step: the pending token and k drafted tokens
at consecutive positions. Its linears read each weight once for all rows (one matrix product
over [n, K] where the linear is dense; a 4-bit linear is streamed once per row by the step's own
GEMV, which is what makes a 4-bit verify cost n steps: docs/SPECULATION.md). Attention is the
ops module's rows_rope_attention: every row stores its key and value at pos[j], then row j
attends over 0..pos[j], so the rows see each other causally, as a prefill's would; on CUDA in
three kernels for all rows, which read the cached keys once per block of rows.
Inputs are rounded as the step's are (normed in float32, cast to the weight dtype); shapes
depend on n only, so a verify step is captured once per n.
"""

from typing import Optional

import torch
import torch.nn.functional as F

from ..model.llama import gelu_gate_up, rms_norm, silu_gate_up
from ..weights.gptq import dense, PackedLinear


class RowOps:
    """The ops module's functions with a leading row dimension on every activation."""

    def __init__(self, ops):
        self.ops = ops

    def embed(self, table: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
        """Rows of table for tokens [n] as float32 [n, H]."""
        return table.index_select(0, token).float()

    def _linear(self, x: torch.Tensor, w, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        # x is already in the weight dtype; float32 [n, N] out.
        return F.linear(x, w, bias).float()

    def rms_matvec(self, x: torch.Tensor, norm_w: torch.Tensor, w, bias: Optional[torch.Tensor],
                   eps: float, out: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Return w @ rms_norm(x[j]) (+ bias) for each row, float32 [n, N]."""
        if isinstance(w, PackedLinear) and not _dequantised(x):
            y = torch.stack([self.ops.rms_matvec(row, norm_w, w, bias, eps) for row in x])
        else:
            w = dense(w)
            y = self._linear(rms_norm(x, norm_w, eps).to(w.dtype), w, bias)
        return y if out is None else out.copy_(y)

    def rms_gate_up_silu(self, x: torch.Tensor, norm_w: torch.Tensor, w_gate_up,
                         eps: float) -> torch.Tensor:
        """Return silu(gate) * up for each row, float32 [n, I]."""
        return self._gate_up(x, norm_w, w_gate_up, eps, self.ops.rms_gate_up_silu, silu_gate_up)

    def rms_gate_up_gelu(self, x: torch.Tensor, norm_w: torch.Tensor, w_gate_up,
                         eps: float) -> torch.Tensor:
        """Return gelu_tanh(gate) * up for each row, float32 [n, I]."""
        return self._gate_up(x, norm_w, w_gate_up, eps, self.ops.rms_gate_up_gelu, gelu_gate_up)

    def _gate_up(self, x, norm_w, w_gate_up, eps, step_op, activation) -> torch.Tensor:
        # step_op: the step's own fused op, one row at a time; activation: its PyTorch twin.
        if isinstance(w_gate_up, PackedLinear) and not _dequantised(x):
            return torch.stack([step_op(row, norm_w, w_gate_up, eps) for row in x])
        w = dense(w_gate_up)
        return activation(F.linear(rms_norm(x, norm_w, eps).to(w.dtype), w), w_gate_up).float()

    def matvec_add(self, x: torch.Tensor, a: torch.Tensor, w) -> None:
        """Add w @ a[j] into each row x[j] in place."""
        if isinstance(w, PackedLinear) and not _dequantised(x):
            for row, a_row in zip(x, a):
                self.ops.matvec_add(row, a_row, w)
            return
        w = dense(w)
        x += self._linear(a.to(w.dtype), w)

    def matvec_norm_add(self, x: torch.Tensor, a: torch.Tensor, w, norm_w: torch.Tensor,
                        eps: float) -> None:
        """Add rms_norm(w @ a[j]) into each row x[j] in place (Gemma 3's post-norms)."""
        if isinstance(w, PackedLinear) and not _dequantised(x):
            for row, a_row in zip(x, a):
                self.ops.matvec_norm_add(row, a_row, w, norm_w, eps)
            return
        w = dense(w)
        y = F.linear(a.to(w.dtype), w)
        x += rms_norm(y, norm_w, eps).to(w.dtype).float()

    def head_norm(self, qkv: torch.Tensor, q_norm: torch.Tensor, k_norm: torch.Tensor,
                  num_heads: int, eps: float) -> None:
        """Normalise each row's q and k heads in place (the step's head_norm, over rows)."""
        self.ops.head_norm(qkv, q_norm, k_norm, num_heads, eps)

    def rope_attention(self, qkv: torch.Tensor, pos: torch.Tensor, cos: torch.Tensor,
                       sin: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                       num_heads: int, scale: Optional[float] = None,
                       window: int = 0) -> torch.Tensor:
        """Row j at position pos[j]: rotate, store k and v, attend over 0..pos[j]; [n, Hq D]."""
        return self.ops.rows_rope_attention(qkv, pos, cos, sin, k_cache, v_cache, num_heads,
                                            scale, window)


def _dequantised(x: torch.Tensor) -> bool:
    # On a CPU the step itself dequantises a 4-bit linear on every call (ops_torch): one
    # dequantised product serves every row there.
    return x.device.type != 'cuda'
