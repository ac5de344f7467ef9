"""
The CUDA 4-bit GEMVs (q4_gemv.cu) against the Triton kernel and the exact float weights.

Both kernels compute each code word's 8 products with the same half2 instructions, so they
differ only in the order of their float32 sums and in rstd's last bits: the CUDA result must
be as close to the Triton one as that allows, for every launch shape, op, dtype and zero, and
as close to the exact product as the half2 sums are. The launch-shape rule and the build
are checked without a GPU.
"""

from pathlib import Path
import shutil

from physinf_ros.engine.kernels import cuda_library, q4_cuda
from physinf_ros.engine.kernels.config import KernelConfig
from physinf_ros.engine.kernels.ops_triton import KernelOps
from physinf_ros.engine.kernels.q4_cuda import Q4Shape
from physinf_ros.engine.weights import gptq
from physinf_ros.engine.weights.gptq import PackedLinear
import pytest
import torch

CUDA = torch.device('cuda')
# Same products, other summation order: float32 rounding, far below the half2 sums' own error
# (HALF2 below). With RMSNorm a last-bit difference in rstd can flip an input's bf16 rounding,
# which moves y by at most 2^-8 of that one product: hence the larger bound there.
ORDER, ORDER_NORMED = 1e-5, 3e-4
HALF2 = 5e-3   # fp16 sums of 8 products against the exact float64 GEMV (random weights)


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def packed(n, k, group_size, dtype, asymmetric, seed):
    gen = torch.Generator().manual_seed(seed)
    q = gptq.quantize(torch.randn(n, k, generator=gen) * 0.05, group_size)
    if asymmetric:
        q['qzeros'] = gptq.pack_zeros(torch.randint(1, 17, (k // group_size, n), generator=gen))
    return PackedLinear.from_gptq(q['qweight'], q['qzeros'], q['scales'], None, dtype, CUDA)


def exact(w, x):
    return w.dense(torch.float64) @ x.double()


def inputs(k, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(k, generator=gen) * 3).to(CUDA)
    norm = (1 + 0.1 * torch.randn(k, generator=gen)).to(CUDA, dtype)
    return x, norm


def run(op, config, w, x, norm, bias, n):
    ops = KernelOps(config)
    if op == 'qkv':
        return ops.rms_matvec(x, norm, w, bias, 1e-5)
    if op == 'gate_up':
        return ops.rms_gate_up_silu(x, norm, w, 1e-5)
    y = torch.linspace(-1, 1, n, device=CUDA)   # the residual the GEMV adds into
    ops.matvec_add(y, x, w)
    return y


def reference(op, w, x, norm, bias, n):
    """Return the op in float64 on the exact weights, inputs rounded as the kernels round them."""
    dtype = w.dtype
    if op == 'matvec_add':
        return torch.linspace(-1, 1, n, device=CUDA).double() + exact(w, x.to(dtype).float())
    rstd = torch.rsqrt(x.pow(2).mean() + 1e-5)
    h = ((x * rstd).to(dtype) * norm).to(dtype).float()
    y = exact(w, h)
    if op == 'gate_up':
        gate, up = y.chunk(2)
        return torch.nn.functional.silu(gate) * up
    return y + (bias.double() if bias is not None else 0)


# (op, N, K, group): QKV with a bias, gate/up, o_proj and down; N not a multiple of every
# block's columns, K of several groups.
CASES = [('qkv', 200, 512, 128), ('gate_up', 176, 256, 64), ('matvec_add', 96, 384, 32),
         ('matvec_add', 256, 1024, 128)]


@pytest.mark.gpu
@pytest.mark.parametrize('op,n,k,group', CASES)
@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
@pytest.mark.parametrize('asymmetric', [False, True])
def test_cuda_q4_gemv_matches_triton_at_every_launch_shape(op, n, k, group, dtype, asymmetric):
    if q4_cuda.unavailable(CUDA):
        pytest.fail(f'the CUDA 4-bit kernels did not build: {q4_cuda.unavailable(CUDA)}')
    rows = 2 * n if op == 'gate_up' else n
    w = packed(rows, k, group, dtype, asymmetric, seed=n + k)
    x, norm = inputs(k, dtype, seed=k)
    bias = torch.randn(n, device=CUDA).to(dtype) if op == 'qkv' else None
    triton_y = run(op, KernelConfig(q4_cuda=False), w, x, norm, bias, n)
    expected = reference(op, w, x, norm, bias, n)
    assert rel(triton_y, expected) < HALF2
    kind = {'qkv': 'rms_matvec', 'gate_up': 'gate_up', 'matvec_add': 'matvec_add'}[op]
    units = (4,) if op == 'gate_up' or group == 32 else (4, 8)
    splits = q4_cuda.SPLITS if op == 'matvec_add' else (1,)
    for cols in q4_cuda.COLUMNS:
        for unit in units:
            for split in splits:
                shape = Q4Shape(cols, unit, split)
                config = KernelConfig().with_gemv(kind + '_q4cuda', n, k, shape.as_gemv())
                assert config.q4_cuda_path(w, x, norm if op != 'matvec_add' else None)
                y = run(op, config, w, x, norm, bias, n)
                bound = ORDER if op == 'matvec_add' else ORDER_NORMED
                assert rel(y, triton_y) < bound, shape
                assert rel(y, expected) < HALF2, shape


@pytest.mark.gpu
@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
@pytest.mark.parametrize('group', [128, 32])
def test_cuda_q4_gemv_reads_float32_norms_as_the_triton_kernel(dtype, group):
    # Gemma 3's QKV: its norm weight (1 + weight) in float32, every launch shape of both units.
    if q4_cuda.unavailable(CUDA):
        pytest.fail(f'the CUDA 4-bit kernels did not build: {q4_cuda.unavailable(CUDA)}')
    n, k = 200, 512
    w = packed(n, k, group, dtype, False, seed=7)
    x, norm16 = inputs(k, dtype, seed=8)
    norm = norm16.float() + 0.001   # values the 16-bit dtype cannot hold
    triton_y = run('qkv', KernelConfig(q4_cuda=False), w, x, norm, None, n)
    expected = reference('qkv', w, x, norm, None, n)
    assert rel(triton_y, expected) < HALF2
    for cols in q4_cuda.COLUMNS:
        for unit in (4,) if group == 32 else (4, 8):
            shape = Q4Shape(cols, unit, 1)
            config = KernelConfig().with_gemv('rms_matvec_q4cuda', n, k, shape.as_gemv())
            assert config.q4_cuda_path(w, x, norm)
            y = run('qkv', config, w, x, norm, None, n)
            assert rel(y, triton_y) < ORDER_NORMED, shape
            assert rel(y, expected) < HALF2, shape


@pytest.mark.gpu
def test_cuda_q4_gemv_replays_in_a_graph_with_the_triton_kernels():
    # A chain as in the step: the CUDA GEMV reads what a Triton kernel wrote before it, under
    # programmatic dependent launch, inside one captured graph replayed at new inputs.
    w_up = packed(2 * 256, 512, 128, torch.bfloat16, False, seed=1)
    w_down = packed(512, 256, 128, torch.bfloat16, False, seed=2)
    x = torch.randn(512, device=CUDA)
    norm = torch.ones(512, device=CUDA, dtype=torch.bfloat16)
    x_eager = x.clone()

    def step(ops, residual):
        h = ops.rms_gate_up_silu(residual, norm, w_up, 1e-5)
        ops.matvec_add(residual, h, w_down)

    assert KernelConfig().q4_kernel_note(CUDA) == '4-bit GEMVs: CUDA kernels (q4_gemv.cu)'
    ops = KernelOps(KernelConfig())
    step(ops, x)   # built and warmed outside the capture, as the engine does
    x.copy_(x_eager)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step(ops, x)
    triton_ops = KernelOps(KernelConfig(q4_cuda=False))
    for _ in range(3):
        graph.replay()
        step(triton_ops, x_eager)
        torch.cuda.synchronize()
        assert rel(x, x_eager) < ORDER_NORMED


def test_launch_shapes_fill_the_gpu_without_idle_row_lanes():
    # Llama-3.1-8B's 4-bit GEMVs on 132 SMs, group 128 (16 word rows per group).
    for n, k, gate_up, accumulate in ((6144, 4096, False, False), (4096, 4096, False, True),
                                      (14336, 4096, True, False), (4096, 14336, False, True)):
        shape = q4_cuda.launch_shape(n, k, 16, gate_up, accumulate, 132)
        steps = k // 8 // shape.unit
        per_split = -(-steps // shape.split_k)
        assert shape.unit == (4 if gate_up else 8)
        assert per_split >= 256 // (shape.cols // 4)           # every row lane has a step
        assert -(-n // shape.cols) * -(-steps // per_split) >= q4_cuda.BLOCKS_PER_SM * 132
        assert accumulate or shape.split_k == 1                # stores take the whole K
    # Groups of 4 word rows (group size 32) take steps of 4 rows, so a scale covers a step.
    assert q4_cuda.launch_shape(96, 384, 4, False, True, 132).unit == 4
    # A GEMV too small to fill the GPU takes the shape with the most blocks.
    small = q4_cuda.launch_shape(64, 128, 16, False, False, 132)
    assert small == Q4Shape(16, 8, 1)


def test_kernel_configs_carry_the_switch_and_cuda_shapes_as_kernels_yaml_spells_them():
    config = KernelConfig().with_flag('Q4_CUDA', '0')
    assert config.q4_cuda is False and config.facts()['q4_cuda'] is False
    assert 'switched off' in config.q4_kernel_note(torch.device('cpu'))
    shape = Q4Shape(64, 4, 1)
    assert Q4Shape.from_gemv(shape.as_gemv()) == shape
    tuned = KernelConfig().with_tuning({'gemv': [{'kind': 'gate_up_q4cuda', 'n': 14336,
                                                  'k': 4096, **vars(shape.as_gemv())}]})
    w = PackedLinear(torch.zeros(512, 28672, dtype=torch.int32),
                     torch.zeros(32, 28672, dtype=torch.float16), None, 128, torch.bfloat16)
    assert tuned.q4_cuda_shape('gate_up', 14336, 4096, w, False, torch.device('cpu')) == shape
    # The CPU never takes the CUDA path, whatever the switch says.
    assert not KernelConfig().q4_cuda_path(w, torch.zeros(4096), None)


def test_library_lookup_asks_torch_for_the_capability_once_per_device(monkeypatch):
    # Every eager 4-bit launch looks the library up; the capability query is what costs there.
    asked, built = [], []
    capabilities = {0: (9, 0), 1: (9, 0), 2: (8, 9)}
    monkeypatch.setattr(torch.cuda, 'get_device_capability',
                        lambda index: asked.append(index) or capabilities[index])
    monkeypatch.setattr(q4_cuda, 'LIBRARIES', cuda_library.Libraries(
        lambda capability: built.append(capability) or capability))
    for _ in range(3):
        for index in (0, 1, 2):
            q4_cuda.library(torch.device('cuda', index))
    assert asked == [0, 1, 2]
    assert built == [(9, 0), (8, 9)]    # one build per architecture, shared by its devices
    assert q4_cuda.library(torch.device('cuda', 2)) == (8, 9)


@pytest.mark.skipif(shutil.which('nvcc') is None and not Path('/usr/local/cuda/bin/nvcc').exists(),
                    reason='needs nvcc (the CUDA toolkit) to compile q4_gemv.cu')
def test_cuda_source_compiles_for_hopper_without_spills(tmp_path):
    import subprocess
    nvcc = cuda_library.nvcc()
    out = subprocess.run([nvcc, *cuda_library.FLAGS, '-arch=sm_90', '-Xptxas', '-v', '-o',
                          str(tmp_path / 'q4.so'), str(q4_cuda.SOURCE)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    report = out.stderr
    # 4 column widths x 3 variants with 16-bit norms, and the 2 that are not gate/up with float32
    assert report.count('Compiling entry function') == 20
    assert '0 bytes spill stores' in report
    assert all(line.strip().startswith('0 bytes stack frame, 0 bytes spill stores')
               for line in report.splitlines() if 'spill stores' in line)


def test_norm_weights_in_the_models_dtype_or_float32_but_for_gate_up_take_the_cuda_kernel():
    # q4_gemv.cu reads a norm weight in the model's dtype, or in float32 (Gemma 3's (1 +
    # weight); read as 16-bit once, they gave NaN steps on the H200) for a GEMV that is not
    # gate/up (Gemma's gate/up is GeGLU, Triton's). Any other dtype goes to the Triton kernel.
    # CPU tensors suffice: only dtypes, shapes and alignment are read.
    q = gptq.quantize(torch.randn(64, 256) * 0.05, 128)
    w = PackedLinear.from_gptq(q['qweight'], q['qzeros'], q['scales'], None, torch.bfloat16,
                               torch.device('cpu'))
    x = torch.zeros(256)
    assert q4_cuda.supported(w, x, None)
    assert q4_cuda.supported(w, x, torch.zeros(256, dtype=torch.bfloat16))
    assert q4_cuda.supported(w, x, torch.zeros(256, dtype=torch.float32))
    assert q4_cuda.supported(w, x, torch.zeros(256, dtype=torch.bfloat16), gate_up=True)
    assert not q4_cuda.supported(w, x, torch.zeros(256, dtype=torch.float32), gate_up=True)
    assert not q4_cuda.supported(w, x, torch.zeros(256, dtype=torch.float16))
