"""
4-bit GPTQ linears in our engine: the repacked layout, the kernels, the forward.

The kernels run natively on a GPU and in Triton's interpreter elsewhere; the forward is checked
against transformers on the exact float32 dequantisation of the same checkpoint.
"""

from kernel_device import DEVICE
from physinf_ros.engine.base import DecoderInfo
from physinf_ros.engine.decoders.hf import HFDecoder, load_hf_model
from physinf_ros.engine.decoders.native import NativeDecoder, PREFILL_ROWS
from physinf_ros.engine.kernels import ops_torch, ops_triton
from physinf_ros.engine.kernels.config import KernelConfig
from physinf_ros.engine.kernels.rows import RowOps
from physinf_ros.engine.model import families, llama
from physinf_ros.engine.model.llama import decode_one_token, KVCache, load_hf_dir, rope_tables
from physinf_ros.engine.sampling import Sampling
from physinf_ros.engine.weights import gptq
from physinf_ros.engine.weights.gptq import PackedLinear
from physinf_ros.engine.weights.resolve import resolve
import pytest
from rows_checks import assert_rows_gemvs_are_row_by_row
from tiny_models import ARCHS, save_tiny_gptq
import torch


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def quantised(n, k, group_size, zeros=None, seed=0):
    """GPTQ tensors of a random [n, k] linear; zeros [k / g, n] (1..16) makes it asymmetric."""
    gen = torch.Generator().manual_seed(seed)
    stored = gptq.quantize(torch.randn(n, k, generator=gen) * 0.05, group_size)
    if zeros is not None:
        stored['qzeros'] = gptq.pack_zeros(zeros)
    return stored


def packed(n, k, group_size, dtype=torch.float32, asymmetric=False, seed=0):
    zeros = None
    if asymmetric:
        zeros = torch.randint(1, 17, (k // group_size, n),
                              generator=torch.Generator().manual_seed(seed + 1))
    q = quantised(n, k, group_size, zeros, seed)
    return PackedLinear.from_gptq(q['qweight'], q['qzeros'], q['scales'], None, dtype, DEVICE)


@pytest.mark.parametrize('group_size', [32, 64, 128])
@pytest.mark.parametrize('asymmetric', [False, True])
def test_repacked_linear_dequantises_to_exactly_the_gptq_weight(group_size, asymmetric):
    zeros = torch.randint(1, 17, (256 // group_size, 96)) if asymmetric else None
    q = quantised(96, 256, group_size, zeros)
    p = PackedLinear.from_gptq(q['qweight'], q['qzeros'], q['scales'], None, torch.float32,
                               torch.device('cpu'))
    assert p.shape == (96, 256) and p.codes.shape == (32, 96)   # GPTQ's own layout
    assert (p.zeros is None) == (not asymmetric)   # symmetric: no zeros read at all
    assert torch.equal(p.dense(torch.float32), gptq.dequantize(q['qweight'], q['qzeros'],
                                                               q['scales']))
    assert p.nbytes == 96 * 256 // 2 + 96 * 256 // group_size * (2 + asymmetric)


def test_fused_linears_stack_their_rows_and_zeros():
    a, b = packed(64, 128, 64), packed(32, 128, 64, asymmetric=True)
    fused = PackedLinear.cat([a, b])
    assert fused.shape == (96, 128)
    assert torch.equal(fused.dense(), torch.cat([a.dense(), b.dense()]))
    with pytest.raises(ValueError, match='group size'):
        PackedLinear.cat([a, packed(32, 128, 32)])


def test_act_order_and_groups_within_a_word_are_refused():
    q = quantised(64, 128, 32)
    g_idx = torch.arange(128).flip(0) // 32
    with pytest.raises(ValueError, match='act-order'):
        PackedLinear.from_gptq(q['qweight'], q['qzeros'], q['scales'], g_idx, torch.float32,
                               torch.device('cpu'))
    trivial = torch.arange(128, dtype=torch.int32) // 32   # a g_idx that changes nothing
    PackedLinear.from_gptq(q['qweight'], q['qzeros'], q['scales'], trivial, torch.float32,
                           torch.device('cpu'))
    q4 = quantised(64, 128, 32)
    scales = q4['scales'].repeat_interleave(8, dim=0)            # 32 groups of 4 inputs
    with pytest.raises(ValueError, match='multiple of 8'):
        PackedLinear.from_gptq(q4['qweight'], q4['qzeros'].repeat_interleave(8, dim=0), scales,
                               None, torch.float32, torch.device('cpu'))


# Kernels (exact float32 dequantisation, float32 sums) against ops_torch (weights rounded to
# the model dtype): float32 agrees to rounding, bf16 to a few bf16 roundings.
TOL = {torch.float32: 1e-5, torch.bfloat16: 3e-2}


@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
@pytest.mark.parametrize('asymmetric', [False, True])
def test_q4_kernels_match_the_torch_reference(dtype, asymmetric):
    x = torch.randn(256, device=DEVICE)
    norm = torch.randn(256, device=DEVICE).to(dtype)
    bias = torch.randn(96, device=DEVICE).to(dtype)
    qkv = packed(96, 256, 64, dtype, asymmetric)
    for b in (None, bias):
        out = ops_triton.rms_matvec(x, norm, qkv, b, 1e-6)
        assert rel(out, ops_torch.rms_matvec(x, norm, qkv, b, 1e-6)) < TOL[dtype]
    gate_up = packed(2 * 80, 256, 128, dtype, asymmetric, seed=3)
    out = ops_triton.rms_gate_up_silu(x, norm, gate_up, 1e-5)
    assert rel(out, ops_torch.rms_gate_up_silu(x, norm, gate_up, 1e-5)) < TOL[dtype]
    # GeGLU (Gemma 3) in the same kernel's epilogue, its float32 norm as Gemma holds it.
    gelu = ops_triton.rms_gate_up_gelu(x, norm.float(), gate_up, 1e-5)
    assert rel(gelu, ops_torch.rms_gate_up_gelu(x, norm.float(), gate_up, 1e-5)) < TOL[dtype]
    assert rel(gelu, out) > 1e-2
    down = packed(64, 160, 32, dtype, asymmetric, seed=5)   # K not a multiple of the tile
    residual, a = torch.randn(64, device=DEVICE), torch.randn(160, device=DEVICE)
    expected = residual.clone()
    ops_torch.matvec_add(expected, a, down)
    ops_triton.matvec_add(residual, a, down)
    assert rel(residual, expected) < TOL[dtype]


@pytest.mark.parametrize('dtype', [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize('group_size', [32, 128])
@pytest.mark.parametrize('asymmetric', [False, True])
def test_dequantize_kernel_gives_the_packed_linears_dense_weight(dtype, group_size, asymmetric):
    # One kernel for what PackedLinear.dense computes in a dozen torch ops: the exact float32
    # value, rounded once to the model dtype. N and K leave partial tiles.
    w = packed(200, 384, group_size, dtype, asymmetric, seed=7)
    out, ref = ops_triton.dequantize(w), w.dense()
    assert out.dtype == dtype and out.shape == (200, 384)
    if dtype == torch.bfloat16 and ops_triton.INTERPRET:
        # The interpreter rounds to bf16 by truncation, a GPU (and torch) to nearest: at most
        # one bf16 step (2^-7 of the value) apart, and mostly equal.
        gap = (out.float() - ref.float()).abs()
        assert bool((gap <= ref.float().abs() * 2.0 ** -7).all())
        assert (gap == 0).float().mean() > 0.4
    else:
        assert torch.equal(out, ref)


@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
@pytest.mark.parametrize('rows', [1, 5, 16, 40, 65])   # 40: 64 padded rows; 65: dequantised
@pytest.mark.parametrize('q4_rows_min', [1, KernelConfig().q4_rows_min])
def test_4bit_gemvs_over_rows_are_the_step_ops_row_by_row(dtype, rows, q4_rows_min):
    # Each code word read once for every row (_rows_q4_kernel, from q4_rows_min to Q4_ROWS
    # rows; fewer rows take the step's GEMV once a row), past that the linear dequantised whole
    # for one matrix product; norm, bias, both activations and the residual (split K) as the
    # one-row ops apply them.
    x, a = torch.randn(rows, 256, device=DEVICE), torch.randn(rows, 160, device=DEVICE)
    norm = torch.randn(256, device=DEVICE).to(dtype)
    bias = torch.randn(96, device=DEVICE).to(dtype)
    qkv = packed(96, 256, 64, dtype, asymmetric=True)
    gate_up, down = packed(2 * 72, 256, 32, dtype, seed=3), packed(64, 160, 32, dtype, seed=5)
    config = KernelConfig(q4_rows_min=q4_rows_min)
    assert ops_triton._rows_path(x, qkv, config) == (
        'q4_each' if rows < q4_rows_min else 'q4' if rows <= ops_triton.Q4_ROWS else 'dense')
    assert_rows_gemvs_are_row_by_row(x, a, norm, qkv, bias, gate_up, down,
                                     torch.randn(64, device=DEVICE).to(dtype), TOL[dtype],
                                     config)


def test_q4_rows_min_is_a_kernel_setting_for_an_ab():
    assert KernelConfig().with_flag('Q4_ROWS_MIN', '1').q4_rows_min == 1
    assert KernelConfig(q4_rows_min=5).facts()['q4_rows_min'] == 5
    with pytest.raises(ValueError, match='q4_rows_min is 1'):
        KernelConfig(q4_rows_min=0)


def test_4bit_prompt_on_the_dequantize_kernel_is_the_torch_prompt(tmp_path):
    # The decoder's prefill passes its ops' dense: on the kernels, the same float32 weights,
    # so the same logits and cache bit for bit.
    gptq_dir, _ = save_tiny_gptq('qwen2.5-7b', tmp_path)
    weights = load_hf_dir(gptq_dir, DEVICE, torch.float32, packed=True)
    family = families.module(weights.config)
    cos, sin = family.rope_tables(weights.config, 64, DEVICE)
    caches = [KVCache.allocate(weights.config, 64, DEVICE, torch.float32) for _ in range(2)]
    prompt = torch.arange(3, 40, device=DEVICE)
    ref = families.prefill(family, weights, caches[0], prompt, cos, sin)
    # The kernels' dequantize with PyTorch's other prompt ops (test_family_kernels.py checks
    # the fused ones, which sum in another order).
    ops = llama.PromptOps(dense=ops_triton.KernelOps(KernelConfig()).prompt.dense)
    out = families.prefill(family, weights, caches[1], prompt, cos, sin, ops=ops)
    assert torch.equal(out, ref) and torch.equal(caches[1].k, caches[0].k)


@pytest.mark.parametrize('rows', [4, 40])
def test_4bit_forward_over_rows_is_its_steps_one_by_one(tmp_path, rows):
    # A 4-bit verify step (4 rows) and a short prompt's prefill (40 rows) through RowOps on the
    # kernels give the residuals and cache that the torch path's steps give in turn.
    gptq_dir, _ = save_tiny_gptq('qwen2.5-7b', tmp_path)
    weights = load_hf_dir(gptq_dir, DEVICE, torch.float32, packed=True)
    cos, sin = rope_tables(weights.config, 64, DEVICE)
    caches = [KVCache.allocate(weights.config, 64, DEVICE, torch.float32) for _ in range(2)]
    tokens = torch.randint(3, 500, (rows,), generator=torch.Generator().manual_seed(4))
    tokens = tokens.to(DEVICE)
    pos = torch.arange(3, 3 + rows, dtype=torch.int32, device=DEVICE)
    ref = torch.stack([llama.decode_layers(weights, caches[0], tokens[j:j + 1], pos[j:j + 1],
                                           cos, sin, ops_torch) for j in range(rows)])
    out = llama.decode_layers(weights, caches[1], tokens, pos, cos, sin,
                              RowOps(ops_triton.KernelOps(KernelConfig())))
    assert rel(out, ref) < 1e-5
    assert rel(caches[1].k, caches[0].k) < 1e-5 and rel(caches[1].v, caches[0].v) < 1e-5


def greedy(decoder, prompt, steps):
    tokens = [decoder.prefill(prompt, Sampling())]
    logits = [decoder.last_logits().float().clone()]
    for _ in range(steps):
        tokens.append(decoder.step())
        logits.append(decoder.last_logits().float().clone())
    return tokens, logits


@pytest.mark.parametrize('arch', ARCHS)
def test_4bit_forward_matches_transformers_on_the_dequantised_weights(tmp_path, arch):
    gptq_dir, float_dir = save_tiny_gptq(arch, tmp_path)
    cpu = torch.device('cpu')
    weights = load_hf_dir(gptq_dir, cpu, torch.float32, packed=True)
    assert isinstance(weights.layers[0].w_down, PackedLinear)
    assert weights.step_facts().group_size == 32
    info = DecoderInfo('eager', 'cpu', 'float32', arch, 128)
    ours = NativeDecoder(weights, info, cpu, graphed=False)
    reference = HFDecoder(load_hf_model(resolve(str(float_dir)), cpu, torch.float32),
                          info, cpu)
    prompt = torch.randint(3, 512, (20,), generator=torch.Generator().manual_seed(2)).tolist()
    ours_tokens, ours_logits = greedy(ours, prompt, 32)
    ref_tokens, ref_logits = greedy(reference, prompt, 32)
    assert ours_tokens == ref_tokens
    assert max(rel(a, b) for a, b in zip(ours_logits, ref_logits)) < 1e-4
    # The prompt over rows, as graphed CUDA prefills a short one (here on the CPU, uncaptured).
    ours.prefill_rows, ours.reuse_prefix = PREFILL_ROWS, False
    rows_tokens, rows_logits = greedy(ours, prompt, 32)
    assert rows_tokens == ref_tokens
    assert max(rel(a, b) for a, b in zip(rows_logits, ref_logits)) < 1e-4


def test_whole_4bit_step_on_the_kernels_matches_the_torch_path(tmp_path):
    gptq_dir, _ = save_tiny_gptq('qwen2.5-7b', tmp_path)   # biases, GQA, groups of 32
    weights = load_hf_dir(gptq_dir, DEVICE, torch.float32, packed=True)
    cos, sin = rope_tables(weights.config, 64, DEVICE)
    caches = [KVCache.allocate(weights.config, 64, DEVICE, torch.float32) for _ in range(2)]
    token = torch.tensor([7], device=DEVICE)
    for pos in range(3):
        p = torch.tensor([pos], dtype=torch.int32, device=DEVICE)
        ref = decode_one_token(weights, caches[0], token, p, cos, sin, ops_torch)
        out = decode_one_token(weights, caches[1], token, p, cos, sin, ops_triton)
        assert rel(out, ref) < 1e-5
        assert rel(caches[1].k, caches[0].k) < 1e-5
