"""The verify step's kernels over rows against ops_torch's row-by-row loop (natively on a GPU)."""

from kernel_device import DEVICE
from physinf_ros.engine.kernels import ops_torch, ops_triton
from physinf_ros.engine.kernels.config import KernelConfig
from physinf_ros.engine.model.config import ModelConfig
from physinf_ros.engine.model.llama import rope_tables
from poisoned_scratch import poison_scratch
import pytest
from rows_checks import assert_rows_gemvs_are_row_by_row
from tiny_models import twin_caches
import torch

TOL = {torch.float32: 1e-5, torch.bfloat16: 3e-2}


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def rand(*shape, dtype=torch.float32):
    return torch.randn(*shape, device=DEVICE).to(dtype)


@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
@pytest.mark.parametrize('heads, kv_heads, dim, window, scale',
                         [(4, 2, 32, 0, None), (7, 1, 32, 0, None), (4, 1, 256, 6, 0.3),
                          (4, 2, 32, 5, None)])
@pytest.mark.parametrize('rows', [1, 9, 33])
def test_rows_attention_is_the_step_row_by_row(monkeypatch, dtype, heads, kv_heads, dim,
                                               window, scale, rows):
    # Rows at consecutive positions, as a verify step's or a prompt chunk's: each stores its key
    # and value, then attends causally over the cache up to itself. Scratch memory is poisoned
    # with NaN, so a partial of some split or block left unwritten would show.
    poison_scratch(monkeypatch)
    max_context = 300
    config = ModelConfig('llama', 10, heads * dim, 8, 1, heads, kv_heads, dim, 1e-5, 10000.0)
    cos, sin = rope_tables(config, max_context, DEVICE)
    caches = twin_caches(config, max_context, DEVICE, dtype)
    for first in (0, 17, 250):   # from the cache's start, a short prefix, a long one
        pos = torch.arange(first, first + rows, dtype=torch.int32, device=DEVICE)
        qkv = rand(rows, (heads + 2 * kv_heads) * dim)
        ref = ops_torch.rows_rope_attention(qkv, pos, cos, sin, caches[0].k[0], caches[0].v[0],
                                            heads, scale, window)
        out = ops_triton.rows_rope_attention(qkv, pos, cos, sin, caches[1].k[0],
                                             caches[1].v[0], heads, KernelConfig(), scale, window)
        assert out.shape == (rows, heads * dim)
        assert rel(out, ref) < TOL[dtype]
        # bf16: Triton's interpreter rounds to bf16 by truncation, torch to nearest: one ulp.
        assert rel(caches[1].k, caches[0].k) < TOL[dtype] / 3
        assert rel(caches[1].v, caches[0].v) < TOL[dtype] / 3
        # Each row is the step's own attention at its position (the rows see each other).
        last = ops_torch.rope_attention(qkv[-1], pos[-1:], cos, sin, caches[0].k[0].clone(),
                                        caches[0].v[0].clone(), heads, scale, window)
        assert rel(out[-1], last) < TOL[dtype]


@pytest.mark.parametrize('rows', [1, 3])
def test_head_norm_over_rows_is_each_rows_head_norm(rows):
    heads, kv_heads, dim = 4, 2, 32
    qkv = rand(rows, (heads + 2 * kv_heads) * dim)
    q_norm, k_norm = rand(dim) + 1.0, rand(dim) + 1.0
    expected = qkv.clone()
    for row in expected:
        ops_torch.head_norm(row, q_norm, k_norm, heads, 1e-6)
    for ops in (ops_torch, ops_triton):
        out = qkv.clone()
        ops.head_norm(out, q_norm, k_norm, heads, 1e-6)
        assert rel(out, expected) < 1e-5, ops.__name__
    assert rel(expected, qkv) > 0.1   # the norm changed something


@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
@pytest.mark.parametrize('rows, rows_max', [(1, 16), (5, 16), (16, 16), (17, 16), (17, 32),
                                            (40, 64)])   # 17 past rows_max 16: cuBLAS's
def test_rows_gemvs_are_the_step_ops_row_by_row(dtype, rows, rows_max):
    # Each weight tile meets every row in one product (rows padded to 16, 32 or 64); the norm,
    # the bias, the activation and the residual as the one-row ops apply them. Shapes that
    # leave partial tiles everywhere.
    n, k, i = 72, 200, 72
    x, a = rand(rows, k), rand(rows, n)
    g, w, b = rand(k, dtype=dtype), rand(n, k, dtype=dtype) * 0.2, rand(n, dtype=dtype)
    w_gate_up = (rand(2 * i, k) * 0.1).to(dtype)
    g_out, w_down = rand(n, dtype=dtype), (rand(n, n) * 0.2).to(dtype)
    assert_rows_gemvs_are_row_by_row(x, a, g, w, b, w_gate_up, w_down, g_out, TOL[dtype],
                                     KernelConfig(rows_max=rows_max))


def test_rows_max_is_a_kernel_setting_within_what_the_kernels_pad_to():
    assert KernelConfig().with_flag('ROWS_MAX', '32').rows_max == 32
    with pytest.raises(ValueError, match='rows_max is 16 to 64'):
        KernelConfig(rows_max=128)
