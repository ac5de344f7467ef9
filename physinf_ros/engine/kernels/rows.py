"""
The decode step's operations over n rows: tokens [n] at positions pos [n], one forward.

RowOps wraps an ops module (ops_torch or ops_triton's KernelOps) so that a family's
decode_layers, unchanged, runs over rows: a speculative verify step (the pending token and k
drafted tokens at consecutive positions) or a short prompt's prefill. Each op is the ops
module's rows_ twin, which reads each weight once for all rows: on CUDA up to ops_triton.ROWS_P
rows meet each weight tile in one product (norm, activation and residual fused as in the
step's kernels), more rows go to cuBLAS; a 4-bit linear's codes are read once for
KernelConfig.q4_rows_min to ops_triton.Q4_ROWS rows and dequantised in registers, fewer rows
(a short verify step) take the step's 4-bit GEMV once a row, more dequantise it whole for
cuBLAS.
Attention is rows_rope_attention: every row stores its key and value at pos[j], then row j
attends over 0..pos[j], so the rows see each other causally, as a prefill's would.
Shapes depend on n only, so a verify step is captured once per n.
"""

from typing import Optional

import torch

from .ops_torch import embed_rows, HeadNorms


class RowOps:
    """The ops module's functions with a leading row dimension on every activation."""

    def __init__(self, ops):
        self.ops = ops

    def embed(self, table: torch.Tensor, token: torch.Tensor,
              scale: Optional[float] = None) -> torch.Tensor:
        """Rows of table for tokens [n] as float32 [n, H], times scale in its dtype if given."""
        return embed_rows(table, token, scale)

    def rms_matvec(self, x: torch.Tensor, norm_w: torch.Tensor, w, bias: Optional[torch.Tensor],
                   eps: float, out: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Return w @ rms_norm(x[j]) (+ bias) for each row, float32 [n, N]."""
        return self.ops.rows_rms_matvec(x, norm_w, w, bias, eps, out)

    def rms_gate_up_silu(self, x: torch.Tensor, norm_w: torch.Tensor, w_gate_up,
                         eps: float) -> torch.Tensor:
        """Return silu(gate) * up for each row, float32 [n, I]."""
        return self.ops.rows_gate_up_silu(x, norm_w, w_gate_up, eps)

    def rms_gate_up_gelu(self, x: torch.Tensor, norm_w: torch.Tensor, w_gate_up,
                         eps: float) -> torch.Tensor:
        """Return gelu_tanh(gate) * up for each row, float32 [n, I]."""
        return self.ops.rows_gate_up_gelu(x, norm_w, w_gate_up, eps)

    def matvec_add(self, x: torch.Tensor, a: torch.Tensor, w) -> None:
        """Add w @ a[j] into each row x[j] in place."""
        self.ops.rows_matvec_add(x, a, w)

    def matvec_norm_add(self, x: torch.Tensor, a: torch.Tensor, w, norm_w: torch.Tensor,
                        eps: float) -> None:
        """Add rms_norm(w @ a[j]) into each row x[j] in place (Gemma 3's post-norms)."""
        self.ops.rows_matvec_norm_add(x, a, w, norm_w, eps)

    def rope_attention(self, qkv: torch.Tensor, pos: torch.Tensor, cos: torch.Tensor,
                       sin: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                       num_heads: int, scale: Optional[float] = None, window: int = 0,
                       head_norms: Optional[HeadNorms] = None) -> torch.Tensor:
        """
        Row j at position pos[j]: rotate, store k and v, attend over 0..pos[j]; [n, Hq D].

        head_norms (q_norm, k_norm, eps) first norms every row's q and k heads in place, in
        one kernel of its own (the step's split kernel does it inside).
        """
        if head_norms is not None:
            q_norm, k_norm, eps = head_norms
            self.ops.head_norm(qkv, q_norm, k_norm, num_heads, eps)
        return self.ops.rows_rope_attention(qkv, pos, cos, sin, k_cache, v_cache, num_heads,
                                            scale, window)
