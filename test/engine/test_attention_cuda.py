"""
The CUDA attention kernel (attention.cu) against the Triton split and reduce kernels.

Both round q and k to the cache dtype before RoPE and the probabilities to it before the product
with the values, in an online softmax; they differ in the order of float32 sums, in the keys
each running maximum covers (64 in Triton, 16 in CUDA) and in their chunks (8 or 16 splits
against 32), which moves those roundings. So the CUDA output must be as close to the float32
reference (ops_torch on the same cache in float32) as the Triton one is, at lengths that put
the new key in the first and later tiles and splits, up to every split full (16384 keys), and
must store the same key and value at pos. The build and the switch are checked without a GPU.
"""

from physinf_ros.engine import attention_cuda, cuda_build, kernels, ops_torch
from physinf_ros.engine.kernels import KernelConfig
import pytest
import torch

CUDA = torch.device('cuda')
MAX_CONTEXT = 16384 + 64
# (query heads, kv heads, head dim): Llama-3.1-8B, Llama-3.2-1B, Qwen2.5-1.5B, Llama-3.2-3B,
# Qwen2.5-7B (group 7).
SHAPES = [(32, 8, 128), (32, 8, 64), (12, 2, 128), (24, 8, 128), (28, 4, 128)]
# 1 key; the first tile's last and the next; split boundaries at min_chunk 128; every split
# busy; every split at 1024 keys.
LENGTHS = (1, 64, 65, 129, 1000, 2048, 2049, 5000, 16384)
# Against float32, the CUDA output's error may exceed the Triton one's by 5% (both are ~3e-3
# in bf16, from the same roundings at other places).
MARGIN = 1.05


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def tables(dim):
    inv_freq = 1.0 / (500000.0 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    angles = torch.outer(torch.arange(MAX_CONTEXT, dtype=torch.float32), inv_freq)
    return angles.cos().to(CUDA), angles.sin().to(CUDA)


@pytest.mark.gpu
@pytest.mark.parametrize('heads,kv_heads,dim', SHAPES)
@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
@pytest.mark.parametrize('splits', [8, 16])
def test_cuda_attention_matches_the_triton_kernels(heads, kv_heads, dim, dtype, splits):
    if attention_cuda.unavailable(CUDA):
        pytest.fail('the CUDA attention kernel is unavailable: '
                    + attention_cuda.unavailable(CUDA))
    gen = torch.Generator(device=CUDA).manual_seed(heads * dim)
    k = torch.randn(kv_heads, MAX_CONTEXT, dim, device=CUDA, generator=gen).to(dtype)
    v = torch.randn(kv_heads, MAX_CONTEXT, dim, device=CUDA, generator=gen).to(dtype)
    cos, sin = tables(dim)
    on = KernelConfig(attention_cuda=True).with_flag('ATTENTION.cuda_splits', str(splits))
    for length in LENGTHS:
        pos = torch.tensor([length - 1], dtype=torch.int32, device=CUDA)
        qkv = torch.randn((heads + 2 * kv_heads) * dim, device=CUDA, generator=gen) * 2
        assert on.attention_cuda_path(qkv, pos, cos, k, v, heads)
        caches = [(k.clone(), v.clone()) for _ in range(3)]
        triton = kernels.rope_attention(qkv, pos, cos, sin, *caches[0], heads, KernelConfig())
        cuda = kernels.rope_attention(qkv, pos, cos, sin, *caches[1], heads, on)
        exact = ops_torch.rope_attention(qkv, pos, cos, sin, caches[2][0].float(),
                                         caches[2][1].float(), heads)
        label = f'length {length}'
        assert rel(cuda, exact) <= MARGIN * rel(triton, exact) + 1e-5, label
        for ours, theirs in zip(caches[1], caches[0]):
            assert torch.equal(ours[:, :length - 1], theirs[:, :length - 1]), label
            assert torch.equal(ours[:, length:], theirs[:, length:]), label
            # The new row: rotated in float32 by both, rounded once; FMA contraction may differ.
            assert rel(ours[:, length - 1], theirs[:, length - 1]) < 2 ** -8, label


@pytest.mark.gpu
def test_cuda_attention_replays_in_a_graph_between_the_gemvs():
    heads, kv_heads, dim, dtype = 32, 8, 128, torch.bfloat16
    gen = torch.Generator(device=CUDA).manual_seed(1)
    k = torch.randn(kv_heads, MAX_CONTEXT, dim, device=CUDA, generator=gen).to(dtype)
    v = torch.randn(kv_heads, MAX_CONTEXT, dim, device=CUDA, generator=gen).to(dtype)
    cos, sin = tables(dim)
    w = (torch.randn(heads * dim, heads * dim, device=CUDA, generator=gen) * 0.02).to(dtype)
    on = kernels.KernelOps(KernelConfig(attention_cuda=True))
    off = kernels.KernelOps(KernelConfig())
    pos = torch.tensor([2047], dtype=torch.int32, device=CUDA)
    qkv = torch.randn((heads + 2 * kv_heads) * dim, device=CUDA, generator=gen)
    x = torch.zeros(heads * dim, device=CUDA)
    k_on, v_on = k.clone(), v.clone()

    def step():   # attention, then a GEMV that reads its output, as in a layer; pos advances
        x.zero_()
        on.matvec_add(x, on.rope_attention(qkv, pos, cos, sin, k_on, v_on, heads), w)
        pos.add_(1)

    step()   # warm-up and build outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    pos.fill_(2047)
    k_off, v_off = k.clone(), v.clone()
    for _ in range(3):
        exact = w.float() @ ops_torch.rope_attention(qkv, pos, cos, sin, k_off.float(),
                                                     v_off.float(), heads)
        want = torch.zeros(heads * dim, device=CUDA)
        off.matvec_add(want, off.rope_attention(qkv, pos, cos, sin, k_off, v_off, heads), w)
        graph.replay()
        torch.cuda.synchronize()
        assert rel(x, exact) <= MARGIN * rel(want, exact) + 1e-5
    assert torch.equal(k_on[:, :2047], k_off[:, :2047])
    assert rel(k_on[:, 2047:2050], k_off[:, 2047:2050]) < 2 ** -8


def test_the_switch_and_the_cpu_keep_the_triton_kernels():
    config = KernelConfig().with_flag('ATTENTION_CUDA', '1')
    assert config.attention_cuda and config.facts()['attention_cuda'] is True
    assert 'switched off' in KernelConfig().attention_kernel_note(torch.device('cpu'))
    cpu = torch.zeros(4, 16, 128, dtype=torch.bfloat16)
    qkv = torch.zeros(12 * 128)
    pos = torch.zeros(1, dtype=torch.int32)
    cos = torch.zeros(16, 64)
    assert not config.attention_cuda_path(qkv, pos, cos, cpu, cpu, 4)
    # Shapes attention.cu does not take stay on Triton wherever they run.
    assert attention_cuda.supported(qkv, pos, cos, cpu, cpu, 4)
    assert not attention_cuda.supported(qkv, pos, cos, cpu.float(), cpu.float(), 4)
    assert not attention_cuda.supported(qkv, pos, cos, cpu[..., :96], cpu[..., :96], 4)
    assert not attention_cuda.supported(qkv, pos, cos, cpu, cpu, 40)     # group 10
    assert not attention_cuda.supported(qkv, pos.long(), cos, cpu, cpu, 4)
    with pytest.raises(ValueError, match='8 or 16'):
        config.with_flag('ATTENTION.cuda_splits', '12')


@pytest.mark.skipif(cuda_build.nvcc() is None, reason='needs nvcc (the CUDA toolkit) to compile '
                    'attention.cu')
def test_cuda_attention_compiles_for_hopper_without_spills(tmp_path):
    import subprocess
    out = subprocess.run([cuda_build.nvcc(), *cuda_build.FLAGS, '-arch=sm_90', '-Xptxas', '-v',
                          '-o', str(tmp_path / 'attention.so'), str(attention_cuda.SOURCE)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    report = out.stderr
    assert report.count('Compiling entry function') == 8   # 2 head dims x 2 dtypes x 2 splits
    assert all(line.strip().startswith('0 bytes stack frame, 0 bytes spill stores')
               for line in report.splitlines() if 'spill stores' in line)
