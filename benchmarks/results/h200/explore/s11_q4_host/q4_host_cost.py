"""Host cost of one eager 4-bit GEMV launch: the q4_cuda_path check, and CUDA against Triton."""
import time

from physinf_ros.engine.gptq import PackedLinear
from physinf_ros.engine.kernels import KernelConfig, KernelOps
import torch

dev = torch.device('cuda')
n = k = 4096
gen = torch.Generator(device=dev).manual_seed(0)
w = PackedLinear(torch.randint(-2 ** 31, 2 ** 31 - 1, (k // 8, n), device=dev, dtype=torch.int32,
                               generator=gen),
                 (torch.rand(k // 128, n, device=dev, generator=gen) * 0.01).half(), None, 128,
                 torch.bfloat16)
x = torch.randn(k, device=dev)
norm = torch.ones(k, device=dev, dtype=torch.bfloat16)
for q4_cuda in (True, False):
    config = KernelConfig(q4_cuda=q4_cuda)
    ops = KernelOps(config)
    for _ in range(50):
        ops.rms_matvec(x, norm, w, None, 1e-5)
    torch.cuda.synchronize()
    calls = 20000
    start = time.perf_counter()
    for _ in range(calls):
        config.q4_cuda_path(w, x, norm)
    check_us = (time.perf_counter() - start) / calls * 1e6
    results = []
    for _ in range(5):
        calls = 2000
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            ops.rms_matvec(x, norm, w, None, 1e-5)
        torch.cuda.synchronize()
        results.append((time.perf_counter() - start) / calls * 1e6)
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(200):
        ops.rms_matvec(x, norm, w, None, 1e-5)
    b.record()
    b.synchronize()
    print(f'q4_cuda={int(q4_cuda)}: q4_cuda_path() {check_us:.2f} us a call; eager '
          f'rms_matvec 4096x4096 4-bit: {sorted(results)[2]:.1f} us a call on the host '
          f'(median of 5 x 2000; all {", ".join(f"{r:.1f}" for r in results)}), '
          f'{a.elapsed_time(b) / 200 * 1000:.1f} us a call on the device clock')
