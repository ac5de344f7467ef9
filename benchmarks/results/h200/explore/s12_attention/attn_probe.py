"""
Time attention.cu alone, at each of its splits per kv head, against the Triton kernels.

Usage: [PROBE_LENGTHS="2048 16384"] attn_probe.py. Each arm is checked against float32
(ops_torch) as the GPU tests check it, then timed: a CUDA graph of 50 launches back to back
after warm-up, CUDA events, median of 7; Llama-3.1-8B's attention shape.
"""
from dataclasses import replace
import os

from physinf_ros.engine import kernels, ops_torch
from physinf_ros.engine.kernels import KernelConfig
import torch

dev = torch.device('cuda')
heads, kv_heads, dim = 32, 8, 128
max_context = 16384 + 64
gen = torch.Generator(device=dev).manual_seed(0)
k = torch.randn(kv_heads, max_context, dim, device=dev, generator=gen).to(torch.bfloat16)
v = torch.randn(kv_heads, max_context, dim, device=dev, generator=gen).to(torch.bfloat16)
inv_freq = 1.0 / (500000.0 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
angles = torch.outer(torch.arange(max_context, dtype=torch.float32), inv_freq)
cos, sin = angles.cos().to(dev), angles.sin().to(dev)
qkv = torch.randn((heads + 2 * kv_heads) * dim, device=dev, generator=gen)
base = KernelConfig.for_device(dev)
arms = {'Triton split + reduce': base}
for splits in (8, 16):
    arms[f'attention.cu, {splits} splits'] = replace(
        base, attention_cuda=True, attention=replace(base.attention, cuda_splits=splits))


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def timed(fn, calls=50):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    for _ in range(3):
        graph.replay()
    times = []
    for _ in range(7):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / calls * 1e3)
    return sorted(times)[3]


for length in [int(n) for n in os.environ.get('PROBE_LENGTHS', '2048 16384').split()]:
    pos = torch.tensor([length - 1], dtype=torch.int32, device=dev)
    kv_bytes = 2 * kv_heads * length * dim * 2
    exact = ops_torch.rope_attention(qkv, pos, cos, sin, k.float(), v.float(), heads)
    for name, config in arms.items():
        out = kernels.rope_attention(qkv, pos, cos, sin, k.clone(), v.clone(), heads, config)
        us = timed(lambda: kernels.rope_attention(qkv, pos, cos, sin, k, v, heads, config))
        print(f'ctx {length:>6} {name:>24}: {us:6.1f} us ({kv_bytes / us / 1e6:.2f} TB/s), '
              f'error against float32 {rel(out, exact):.2e}')
