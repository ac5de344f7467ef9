"""
The CUDA attention split kernel (attention_split.cu) against float32 attention and the Triton one.

Both split kernels read the same 16-bit cache and differ in how they sum: the CUDA result must be
as close to float32 arithmetic on that cache (ops_torch) as the Triton kernel's, at lengths that
fill one tile, cross tiles and splits and use every split, for each published model shape; the
cache rows it writes must be the Triton kernel's. Its partials merge in the Triton reduce kernel,
in a captured graph as in the step. The configuration, the choice of path and the build are
checked without a GPU.
"""

from pathlib import Path
import shutil
from types import SimpleNamespace

from physinf_ros.engine.kernels import attention_cuda, cuda_library, ops_torch, ops_triton
from physinf_ros.engine.kernels.config import KernelConfig
from physinf_ros.engine.model.config import ModelConfig
from physinf_ros.engine.model.llama import KVCache, rope_tables
from poisoned_scratch import poison_scratch
import pytest
import torch
import yaml

CUDA = torch.device('cuda')
ON = KernelConfig().with_flag('attention.cuda', '1')
TOL = 3e-2   # the kernels' bound against float32 on a 16-bit cache (test_kernels.TOL)
# (heads, kv heads, head size): Llama-3.1-8B and Mistral-7B, Llama-3.2-1B, Qwen2.5-1.5B,
# Qwen2.5-7B (7 query heads a kv head), Llama-3.2-3B.
SHAPES = [(32, 8, 128), (32, 8, 64), (12, 2, 128), (28, 4, 128), (24, 8, 128)]


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def attention_case(heads, kv_heads, dim, dtype, max_context, seed):
    config = ModelConfig('llama', 10, heads * dim, 8, 1, heads, kv_heads, dim, 1e-5, 500000.0)
    cos, sin = rope_tables(config, max_context, CUDA)
    gen = torch.Generator(device=CUDA).manual_seed(seed)
    cache = KVCache.allocate(config, max_context, CUDA, dtype)
    cache.k.normal_(generator=gen)
    cache.v.normal_(generator=gen)
    return cos, sin, cache, gen


@pytest.mark.gpu
@pytest.mark.parametrize('min_chunk', [64, 128])
@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
@pytest.mark.parametrize('heads, kv_heads, dim', SHAPES)
def test_cuda_split_is_as_close_to_float32_as_the_triton_kernel(heads, kv_heads, dim, dtype,
                                                                min_chunk):
    # Past 32 splits of 128 keys (uneven chunks, every split in use), and the protocol's 16384
    # context, whose splits take 9 tiles: past both rings of the CUDA kernel (2 or 3 stages).
    max_context = 16400
    cos, sin, cache, gen = attention_case(heads, kv_heads, dim, dtype, max_context, 3)
    arms = (('triton', KernelConfig()), ('cuda', ON),
            ('cuda', ON.with_flag('attention.num_stages', '2')))
    configs = {f'{name} {config.attention.num_stages}':
               config.with_flag('attention.min_chunk', str(min_chunk)) for name, config in arms}
    for length in (1, 64, 65, 129, 2048, 2049, 4096, 4160, 16385):
        pos = torch.tensor([length - 1], dtype=torch.int32, device=CUDA)
        qkv = torch.randn((heads + 2 * kv_heads) * dim, device=CUDA, generator=gen)
        k_ref, v_ref = cache.k[0].clone(), cache.v[0].clone()
        ref = ops_torch.rope_attention(qkv, pos, cos, sin, k_ref, v_ref, heads)
        out, written = {}, {}
        for name, config in configs.items():
            k, v = cache.k[0].clone(), cache.v[0].clone()
            assert config.attention_cuda_path(qkv, pos, cos, sin, k, v, heads) == \
                name.startswith('cuda')
            out[name] = ops_triton.rope_attention(qkv, pos, cos, sin, k, v, heads, config)
            written[name] = (k, v)
        triton_error = rel(out['triton 3'], ref)
        k_triton, v_triton = written['triton 3']
        row = length - 1
        ulp = 2.0 ** -7 if dtype == torch.bfloat16 else 2.0 ** -10
        for name in ('cuda 3', 'cuda 2'):
            error = rel(out[name], ref)
            assert error < TOL and error <= 1.25 * triton_error, \
                (name, length, error, triton_error)
            # The ring's depth changes when tiles land, not what is summed or in what order.
            assert torch.equal(out[name], out['cuda 3']), (name, length)
            k, v = written[name]
            # Only row pos is written; its value is a cast (exact), its key a rotation whose
            # float32 sums may contract differently: one rounding of the cache dtype at most.
            assert torch.equal(v, v_triton)
            assert torch.equal(torch.cat([k[:, :row], k[:, row + 1:]], 1),
                               torch.cat([cache.k[0][:, :row], cache.k[0][:, row + 1:]], 1))
            assert torch.allclose(k[:, row].float(), k_triton[:, row].float(), rtol=ulp,
                                  atol=1e-6)
            assert rel(k[:, row], k_ref[:, row]) < ulp


@pytest.mark.gpu
@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
@pytest.mark.parametrize('heads, kv_heads, dim', [(16, 8, 128), (32, 8, 128), (16, 4, 64)])
def test_cuda_split_norms_the_heads_as_the_triton_kernel(heads, kv_heads, dim, dtype):
    # Qwen3's step (0.6B and 1.7B, 4B and 8B; head size 64 for the kernel's other build): the q
    # and k head norms inside the split, in the CUDA kernel as in the Triton one; qkv untouched.
    max_context = 4200
    cos, sin, cache, gen = attention_case(heads, kv_heads, dim, dtype, max_context, 11)
    q_norm = (torch.rand(dim, device=CUDA, generator=gen) + 0.5).to(dtype)
    k_norm = (torch.rand(dim, device=CUDA, generator=gen) + 0.5).to(dtype)
    norms = (q_norm, k_norm, 1e-6)
    for length in (1, 65, 2049, 4160):
        pos = torch.tensor([length - 1], dtype=torch.int32, device=CUDA)
        qkv = torch.randn((heads + 2 * kv_heads) * dim, device=CUDA, generator=gen) * 3.0
        k_ref, v_ref = cache.k[0].clone(), cache.v[0].clone()
        ref = ops_torch.rope_attention(qkv.clone(), pos, cos, sin, k_ref, v_ref, heads,
                                       head_norms=norms)
        out, written = {}, {}
        for name, config in (('triton', KernelConfig()), ('cuda', ON)):
            k, v = cache.k[0].clone(), cache.v[0].clone()
            assert config.attention_cuda_path(qkv, pos, cos, sin, k, v, heads, norms) == \
                (name == 'cuda')
            given = qkv.clone()
            out[name] = ops_triton.rope_attention(given, pos, cos, sin, k, v, heads, config,
                                                  head_norms=norms)
            assert torch.equal(given, qkv), name
            written[name] = (k, v)
        triton_error, cuda_error = rel(out['triton'], ref), rel(out['cuda'], ref)
        assert cuda_error < TOL and cuda_error <= 1.25 * triton_error, \
            (length, cuda_error, triton_error)
        row = length - 1
        ulp = 2.0 ** -7 if dtype == torch.bfloat16 else 2.0 ** -10
        assert torch.equal(written['cuda'][1], written['triton'][1])
        assert torch.allclose(written['cuda'][0][:, row].float(),
                              written['triton'][0][:, row].float(), rtol=2 * ulp, atol=1e-6)
        assert rel(written['cuda'][0][:, row], k_ref[:, row]) < 2 * ulp
    # Gemma 3's float32 norms are read by the Triton kernel only.
    float_norms = (q_norm.float(), k_norm.float(), 1e-6)
    assert not ON.attention_cuda_path(qkv, pos, cos, sin, cache.k[0], cache.v[0], heads,
                                      float_norms)


@pytest.mark.gpu
def test_cuda_split_merges_every_split_when_few_hold_keys(monkeypatch):
    # Splits past the keys write partials of no weight before their wait; the merge reads all
    # of them. Scratch memory is poisoned with NaN so that a partial left unwritten would show.
    heads, kv_heads, dim = 32, 8, 128
    cos, sin, cache, gen = attention_case(heads, kv_heads, dim, torch.bfloat16, 4096, 5)
    for length in (3, 200):   # one split of keys of 32, and four
        pos = torch.tensor([length - 1], dtype=torch.int32, device=CUDA)
        qkv = torch.randn((heads + 2 * kv_heads) * dim, device=CUDA, generator=gen)
        ref = ops_torch.rope_attention(qkv, pos, cos, sin, cache.k[0].clone(),
                                       cache.v[0].clone(), heads)
        with monkeypatch.context() as patch:
            poison_scratch(patch)
            out = ops_triton.rope_attention(qkv, pos, cos, sin, cache.k[0].clone(),
                                            cache.v[0].clone(), heads, ON)
        assert rel(out, ref) < TOL


@pytest.mark.gpu
def test_cuda_split_replays_in_a_graph_at_new_positions():
    # As in the step: a Triton kernel writes qkv, the CUDA split reads it under PDL, the Triton
    # reduce merges; one captured graph replayed at new positions (pos read on the device).
    heads, kv_heads, dim = 32, 8, 128
    cos, sin, cache, gen = attention_case(heads, kv_heads, dim, torch.bfloat16, 4096, 7)
    size = (heads + 2 * kv_heads) * dim
    x = torch.randn(256, device=CUDA, generator=gen)
    w = (torch.randn(size, 256, device=CUDA, generator=gen) * 0.1).to(torch.bfloat16)
    norm = torch.ones(256, device=CUDA, dtype=torch.bfloat16)
    pos = torch.zeros(1, dtype=torch.int32, device=CUDA)

    def attention(k, v):
        qkv = ops_triton.rms_matvec(x, norm, w, None, 1e-5, config=ON)
        return ops_triton.rope_attention(qkv, pos, cos, sin, k, v, heads, ON)

    pos.fill_(10)
    attention(cache.k[0], cache.v[0])   # built and warmed outside the capture
    eager_cache = (cache.k[0].clone(), cache.v[0].clone())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = attention(cache.k[0], cache.v[0])
    for length in (100, 2048, 3001):
        pos.fill_(length - 1)
        graph.replay()
        expected = attention(*eager_cache)
        torch.cuda.synchronize()
        assert rel(out, expected) < 1e-6, length
        assert torch.equal(cache.k[0], eager_cache[0]) and torch.equal(cache.v[0], eager_cache[1])


@pytest.mark.gpu
def test_every_ring_the_kernel_builds_fits_this_gpu_and_grows_with_its_depth():
    lib = attention_cuda.LIBRARIES.get(CUDA)
    for dim in attention_cuda.HEAD_DIMS:
        sizes = [lib.handle.physinf_attn_shared_bytes(dim, stages)
                 for stages in attention_cuda.STAGES]
        assert all(a < b for a, b in zip(sizes, sizes[1:])), (dim, sizes)
        for stages in attention_cuda.STAGES:
            assert attention_cuda.oversize(CUDA, dim, stages) == ''
    assert lib.handle.physinf_attn_shared_bytes(96, 3) == 0   # a head size it does not build
    limit = lib.handle.physinf_attn_shared_limit(torch.cuda.current_device())
    assert limit >= lib.handle.physinf_attn_shared_bytes(128, 3)


def test_a_ring_too_large_for_the_gpu_falls_back_to_the_triton_split(monkeypatch):
    # An L4 gives a block 99 KB of shared memory; the 3-stage ring at head size 128 takes 110.
    sizes = {2: 76_000, 3: 110_000}
    library = SimpleNamespace(handle=SimpleNamespace(
        physinf_attn_shared_bytes=lambda head_dim, stages: sizes[stages] * head_dim // 128,
        physinf_attn_shared_limit=lambda device: 101_376))
    lookups = []
    monkeypatch.setattr(attention_cuda, 'LIBRARIES', SimpleNamespace(
        get=lambda device: lookups.append(device) or library))
    monkeypatch.setattr(attention_cuda, 'unavailable', lambda device: '')
    monkeypatch.setattr(attention_cuda, '_OVERSIZE', {})
    gpu = torch.device('cuda', 0)
    reason = attention_cuda.oversize(gpu, 128, 3)
    assert '110000 bytes' in reason and '101376' in reason and 'num_stages 2' in reason
    assert attention_cuda.oversize(gpu, 128, 3) == reason and len(lookups) == 1   # kept
    assert attention_cuda.oversize(gpu, 128, 2) == '' and attention_cuda.oversize(gpu, 64, 3) == ''
    note = ON.attention_kernel_note(8, 128, gpu)
    assert note.startswith('attention split: Triton kernel, the CUDA kernel does not fit')
    cuda_note = 'attention split: CUDA kernel (attention_split.cu)'
    assert ON.attention_kernel_note(8, 64, gpu) == cuda_note
    two = ON.with_flag('attention.num_stages', '2')
    assert two.attention_kernel_note(8, 128, gpu) == cuda_note


def test_kernels_yaml_puts_the_measured_attention_shapes_on_the_cuda_split():
    # The H200's rows: the shapes measured at v31 (8 kv heads) and in commits 7296e5f and
    # 0ed1ff5 (Qwen2.5-1.5B and Qwen2.5-7B; docs/PERF.md), each with one 64-key tile a split up
    # to 2048 keys; any other shape keeps the Triton split.
    entry = yaml.safe_load(Path(ops_triton.__file__).parents[3].joinpath(
        'config', 'kernels.yaml').read_text())['NVIDIA H200']
    config = KernelConfig().with_tuning(entry)
    for kv_heads, dim in ((8, 128), (8, 64), (2, 128), (4, 128)):
        shape = config.attention_for(kv_heads, dim)
        assert shape.cuda and shape.min_chunk == 64, (kv_heads, dim)
    assert not config.attention_for(4, 64).cuda and not config.attention.cuda
    assert config.facts()['attention']['cuda'] is False


def test_the_switch_is_an_ab_flag_and_the_cpu_never_takes_the_cuda_path():
    assert not KernelConfig().attention.cuda
    config = KernelConfig().with_flag('ATTENTION.cuda', '1')
    assert config.attention.cuda and config.attention_for(8, 128).cuda
    assert 'Triton kernel' in KernelConfig().attention_kernel_note(8, 128, torch.device('cpu'))
    note = config.attention_kernel_note(8, 128, torch.device('cpu'))
    assert 'Triton kernel, the CUDA kernel is unavailable: not a CUDA device' in note
    k = torch.zeros(8, 64, 128, dtype=torch.bfloat16)
    qkv, pos = torch.zeros(48 * 128), torch.zeros(1, dtype=torch.int32)
    cos, sin = torch.zeros(64, 64), torch.zeros(64, 64)
    assert attention_cuda.supported(qkv, pos, cos, sin, k, k.clone(), 32)
    assert not config.attention_cuda_path(qkv, pos, cos, sin, k, k.clone(), 32)   # not a GPU
    # Shapes it does not instantiate go to the Triton kernel.
    assert not attention_cuda.supported(qkv, pos, cos, sin, k.float(), k.float(), 32)   # float32
    assert not attention_cuda.supported(qkv, pos, cos, sin, k, k.clone(), 80)   # 10 a kv head
    assert not attention_cuda.supported(qkv, pos.long(), cos, sin, k, k.clone(), 32)
    odd = torch.zeros(8, 64, 96, dtype=torch.bfloat16)
    assert not attention_cuda.supported(torch.zeros(48 * 96), pos, cos, sin, odd, odd.clone(), 32)
    # Both RoPE tables are read as contiguous float32 rows.
    assert not attention_cuda.supported(qkv, pos, cos, sin.double(), k, k.clone(), 32)
    assert not attention_cuda.supported(qkv, pos, cos, sin.t(), k, k.clone(), 32)
    assert not attention_cuda.supported(qkv, pos, cos.t(), sin, k, k.clone(), 32)
    # Head norms (Qwen3) in the cache's dtype, one weight a head element; Gemma 3's float32
    # ones go to the Triton kernel.
    norm = torch.ones(128, dtype=torch.bfloat16)
    assert attention_cuda.supported(qkv, pos, cos, sin, k, k.clone(), 32, (norm, norm, 1e-6))
    assert not attention_cuda.supported(qkv, pos, cos, sin, k, k.clone(), 32,
                                        (norm.float(), norm.float(), 1e-6))
    assert not attention_cuda.supported(qkv, pos, cos, sin, k, k.clone(), 32,
                                        (norm[:64], norm[:64], 1e-6))


@pytest.mark.skipif(shutil.which('nvcc') is None and not Path('/usr/local/cuda/bin/nvcc').exists(),
                    reason='needs nvcc (the CUDA toolkit) to compile attention_split.cu')
def test_cuda_source_compiles_for_hopper_without_spills(tmp_path):
    import subprocess
    out = subprocess.run([cuda_library.nvcc(), *cuda_library.FLAGS, '-arch=sm_90', '-Xptxas',
                          '-v', '-o', str(tmp_path / 'attention.so'),
                          str(attention_cuda.SOURCE)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    report = out.stderr
    # head sizes 64, 128 x bf16, fp16 x 2, 3 stages
    assert report.count('Compiling entry function') == 4 * len(attention_cuda.STAGES)
    assert all(line.strip().startswith('0 bytes stack frame, 0 bytes spill stores')
               for line in report.splitlines() if 'spill stores' in line)
    # Under 170 registers a thread: three blocks of 128 threads can share an SM.
    registers = [int(line.split('Used ')[1].split()[0]) for line in report.splitlines()
                 if 'registers' in line and 'Used' in line]
    assert len(registers) == 4 * len(attention_cuda.STAGES) and max(registers) <= 168, registers
