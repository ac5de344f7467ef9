"""
The CUDA 16-bit GEMVs (gemv16.cu) against the Triton kernels and the exact float64 product.

Both kernels multiply the same rounded inputs by the same 16-bit weights in float32, so they
differ only in the order of their float32 sums and in rstd's last bits: the CUDA result must be
as close to the Triton one as that allows, for every launch shape, op and dtype, including
shapes whose N and K the blocks and steps do not divide. The launch-shape rule and the build
are checked without a GPU.
"""

from pathlib import Path
import shutil
import subprocess

from physinf_ros.engine import cuda_build, gemv16_cuda
from physinf_ros.engine.gemv16_cuda import Gemv16Shape
from physinf_ros.engine.kernels import KernelConfig, KernelOps
import pytest
import torch

CUDA = torch.device('cuda')
# Same products, other summation order: float32 rounding. With RMSNorm a last-bit difference
# in rstd can flip an input's rounding, which moves y by at most 2^-8 of that one product.
ORDER, ORDER_NORMED = 1e-5, 3e-4


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def case(op, n, k, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    rows = 2 * n if op == 'gate_up' else n
    w = (torch.randn(rows, k, generator=gen) * 0.05).to(CUDA, dtype)
    x = (torch.randn(k, generator=gen) * 3).to(CUDA)
    norm = (1 + 0.1 * torch.randn(k, generator=gen)).to(CUDA, dtype)
    bias = (torch.randn(n, generator=gen)).to(CUDA, dtype) if op == 'qkv' else None
    return w, x, norm, bias


def run(op, config, w, x, norm, bias, n):
    ops = KernelOps(config)
    if op in ('qkv', 'head'):
        return ops.rms_matvec(x, norm, w, bias, 1e-5)
    if op == 'gate_up':
        return ops.rms_gate_up_silu(x, norm, w, 1e-5)
    y = torch.linspace(-1, 1, n, device=CUDA)   # the residual the GEMV adds into
    ops.matvec_add(y, x, w)
    return y


def reference(op, w, x, norm, bias, n):
    """Return the op in float64 on the weights, inputs rounded as the kernels round them."""
    dtype = w.dtype
    if op == 'matvec_add':
        return (torch.linspace(-1, 1, n, device=CUDA).double()
                + w.double() @ x.to(dtype).double())
    rstd = torch.rsqrt(x.pow(2).mean() + 1e-5)
    h = ((x * rstd).to(dtype) * norm).to(dtype).double()
    y = w.double() @ h
    if op == 'gate_up':
        gate, up = y.chunk(2)
        return torch.nn.functional.silu(gate) * up
    return y + (bias.double() if bias is not None else 0)


# (op, N, K): QKV with a bias, a head without one, gate/up, o_proj and down shapes. N is not a
# multiple of every block's outputs, K of 256 (a part step) or of every split's steps.
CASES = [('qkv', 200, 520, 4), ('head', 1000, 2048, 8), ('gate_up', 176, 1032, 2),
         ('matvec_add', 96, 384, 1), ('matvec_add', 264, 3080, 2)]
KINDS = {'qkv': 'rms_matvec', 'head': 'rms_matvec', 'gate_up': 'gate_up',
         'matvec_add': 'matvec_add'}


@pytest.mark.gpu
@pytest.mark.parametrize('op,n,k,seed', CASES)
@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_cuda_gemv16_matches_triton_at_every_launch_shape(op, n, k, seed, dtype):
    if gemv16_cuda.unavailable(CUDA):
        pytest.fail(f'the CUDA 16-bit kernels did not build: {gemv16_cuda.unavailable(CUDA)}')
    w, x, norm, bias = case(op, n, k, dtype, seed)
    triton_y = run(op, KernelConfig(gemv16_cuda=False), w, x, norm, bias, n)
    expected = reference(op, w, x, norm, bias, n)
    # Against float64 the reference's own rstd rounds the inputs, as a third order of sums.
    bound = ORDER if op == 'matvec_add' else ORDER_NORMED
    assert rel(triton_y, expected) < bound
    kind = KINDS[op]
    splits = gemv16_cuda.SPLITS if op == 'matvec_add' else (1,)
    for rows, depth in gemv16_cuda.SHAPES[op == 'gate_up']:
        for split in splits:
            shape = Gemv16Shape(rows, depth, split)
            config = KernelConfig().with_gemv(kind + '_cuda', n, k, shape.as_gemv())
            assert config.gemv16_cuda_path(w, x, norm if op != 'matvec_add' else None)
            y = run(op, config, w, x, norm, bias, n)
            assert rel(y, triton_y) < bound, shape
            assert rel(y, expected) < bound, shape


@pytest.mark.gpu
def test_cuda_gemv16_replays_in_a_graph_with_the_triton_kernels():
    # A chain as in the step: each CUDA GEMV reads what the kernel before it wrote, under
    # programmatic dependent launch, inside one captured graph replayed at new inputs; the
    # head with its argmax stays on the Triton kernel.
    gen = torch.Generator().manual_seed(3)
    w_up = (torch.randn(2 * 768, 512, generator=gen) * 0.05).to(CUDA, torch.bfloat16)
    w_down = (torch.randn(512, 768, generator=gen) * 0.05).to(CUDA, torch.bfloat16)
    w_head = (torch.randn(1000, 512, generator=gen) * 0.05).to(CUDA, torch.bfloat16)
    norm = torch.ones(512, device=CUDA, dtype=torch.bfloat16)
    x = torch.randn(512, device=CUDA)
    x_eager = x.clone()
    logits = torch.empty(1000, device=CUDA)
    token = torch.zeros(1, dtype=torch.long, device=CUDA)
    pos = torch.zeros(1, dtype=torch.int32, device=CUDA)

    def step(ops, residual):
        h = ops.rms_gate_up_silu(residual, norm, w_up, 1e-5)
        ops.matvec_add(residual, h, w_down)
        ops.greedy_head(residual, norm, w_head, 1e-5, logits, token, pos)

    note = KernelConfig().gemv16_kernel_note(CUDA)
    assert note == '16-bit GEMVs: CUDA kernels (gemv16.cu), the greedy head on Triton'
    ops = KernelOps(KernelConfig())
    step(ops, x)   # built and warmed outside the capture, as the engine does
    x.copy_(x_eager)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step(ops, x)
    triton_ops = KernelOps(KernelConfig(gemv16_cuda=False))
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize()
        graphed_token = token.item()
        step(triton_ops, x_eager)
        torch.cuda.synchronize()
        assert rel(x, x_eager) < ORDER_NORMED
        assert graphed_token == token.item() == logits.argmax().item()


def test_launch_shapes_fill_the_gpu():
    # Llama-3.1-8B's and Llama-3.2-1B's GEMVs on 132 SMs.
    for n, k, gate_up, accumulate in ((6144, 4096, False, False), (4096, 4096, False, True),
                                      (14336, 4096, True, False), (4096, 14336, False, True),
                                      (3072, 2048, False, False), (2048, 2048, False, True)):
        shape = gemv16_cuda.launch_shape(n, k, gate_up, accumulate, 132)
        assert (shape.rows, shape.depth) in gemv16_cuda.SHAPES[gate_up]
        blocks = -(-n // (gemv16_cuda.WARPS * shape.rows)) * shape.split_k
        assert blocks >= gemv16_cuda.BLOCKS_PER_SM * 132, (n, k, shape)
        assert accumulate or shape.split_k == 1                # stores take the whole K
        assert -(-k // gemv16_cuda.STEP) // shape.split_k >= shape.depth
    # A GEMV too small to fill the GPU takes the shape with the most blocks.
    assert gemv16_cuda.launch_shape(64, 512, False, False, 132) == Gemv16Shape(1, 2, 1)


def test_kernel_configs_carry_the_switch_and_cuda_shapes_as_kernels_yaml_spells_them():
    config = KernelConfig().with_flag('GEMV16_CUDA', '0')
    assert config.gemv16_cuda is False and config.facts()['gemv16_cuda'] is False
    assert 'switched off' in config.gemv16_kernel_note(torch.device('cpu'))
    shape = Gemv16Shape(2, 4, 1)
    assert Gemv16Shape.from_gemv(shape.as_gemv()) == shape
    tuned = KernelConfig().with_tuning({'gemv': [{'kind': 'gate_up_cuda', 'n': 14336,
                                                  'k': 4096, **vars(shape.as_gemv())}]})
    assert tuned.gemv16_cuda_shape('gate_up', 14336, 4096, False, torch.device('cpu')) == shape
    # The CPU never takes the CUDA path, whatever the switch says.
    w = torch.zeros(64, 512, dtype=torch.bfloat16)
    assert not KernelConfig().gemv16_cuda_path(w, torch.zeros(512), None)
    assert not gemv16_cuda.supported(w.float(), torch.zeros(512), None)   # 16-bit weights only


@pytest.mark.skipif(shutil.which('nvcc') is None and not Path('/usr/local/cuda/bin/nvcc').exists(),
                    reason='needs nvcc (the CUDA toolkit) to compile gemv16.cu')
def test_cuda_source_compiles_for_hopper_without_spills(tmp_path):
    out = subprocess.run([cuda_build.nvcc(), *cuda_build.FLAGS, '-arch=sm_90', '-Xptxas', '-v',
                          '-o', str(tmp_path / 'gemv16.so'), str(gemv16_cuda.SOURCE)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    report = out.stderr
    shapes = sum(len(s) for s in gemv16_cuda.SHAPES.values())
    assert report.count('Compiling entry function') == shapes
    assert all(line.strip().startswith('0 bytes stack frame, 0 bytes spill stores')
               for line in report.splitlines() if 'spill stores' in line)
