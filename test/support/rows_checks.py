"""The rows GEMVs (ops_triton.rows_*) against ops_torch's one-row ops, row by row."""

from physinf_ros.engine.kernels import ops_torch, ops_triton
from physinf_ros.engine.kernels.config import KernelConfig
import torch


def rel(a, b):
    """Relative error of a against b (Frobenius norms, in float32)."""
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def assert_rows_gemvs_are_row_by_row(x, a, norm, w, bias, w_gate_up, w_down, out_norm, tol,
                                     config=KernelConfig()):
    """
    Assert each rows GEMV gives the one-row op's output for every row, within tol.

    x [n, K] meets norm, w (+ bias) and w_gate_up (both activations); a [n, I] meets w_down,
    added into a residual as is and normed by out_norm (Gemma 3's post-norm). Weights 16-bit
    tensors or 4-bit PackedLinears; the rows ops run on config.
    """
    rows = x.shape[0]
    out = ops_triton.rows_rms_matvec(x, norm, w, bias, 1e-6, config=config)
    ref = torch.stack([ops_torch.rms_matvec(row, norm, w, bias, 1e-6) for row in x])
    assert out.shape == (rows, w.shape[0]) and rel(out, ref) < tol
    for gelu, op in ((False, ops_torch.rms_gate_up_silu), (True, ops_torch.rms_gate_up_gelu)):
        out = ops_triton.rows_gate_up(x, norm, w_gate_up, 1e-6, gelu, config)
        ref = torch.stack([op(row, norm, w_gate_up, 1e-6) for row in x])
        assert out.shape == (rows, w_gate_up.shape[0] // 2) and rel(out, ref) < tol, gelu
    residual = torch.randn(rows, w_down.shape[0], device=x.device)
    out, ref = residual.clone(), residual.clone()
    ops_triton.rows_matvec_add(out, a, w_down, config)
    for row, a_row in zip(ref, a):
        ops_torch.matvec_add(row, a_row, w_down)
    assert rel(out - residual, ref - residual) < tol
    out, ref = residual.clone(), residual.clone()
    ops_triton.rows_matvec_norm_add(out, a, w_down, out_norm, 1e-6, config)
    for row, a_row in zip(ref, a):
        ops_torch.matvec_norm_add(row, a_row, w_down, out_norm, 1e-6)
    assert rel(out - residual, ref - residual) < tol
