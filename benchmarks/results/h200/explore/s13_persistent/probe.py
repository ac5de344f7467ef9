"""
Check persistent_layers.cu against the torch ops and the per-op kernels, then time the layers.

For each model shape (random weights, a cache of random keys and values), at several positions:
the residual after every layer and the keys and values stored at pos, from the persistent
kernel and from the per-op kernels, each against ops_torch (the reference) on the same cache.
Then decode_layers alone, graphed, per-op against persistent, arms interleaved.
Usage: probe.py MAX_CONTEXT ARCH...
"""
import sys

from persistent import PersistentLayers, unsupported
from physinf_ros.engine import ops_torch
from physinf_ros.engine.kernels import KernelConfig, KernelOps
from physinf_ros.engine.llama import (decode_layers, from_state_dict, KVCache, ModelConfig,
                                      rope_tables, synthetic_state_dict)
from physinf_ros.engine.models import synthetic_config
import torch


dev = torch.device('cuda')
max_context = int(sys.argv[1])


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def graphed(fn):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def timed(graph, replays=50):
    for _ in range(5):
        graph.replay()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(replays):
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[replays // 2]


for arch in sys.argv[2:]:
    config = ModelConfig.from_hf(synthetic_config(arch))
    w = from_state_dict(config, synthetic_state_dict(config, dev, torch.bfloat16), dev,
                        torch.bfloat16)
    reason = unsupported(w, dev)
    print(f'{arch}: unsupported: {reason!r}')
    if reason:
        continue
    cache = KVCache.allocate(config, max_context, dev, torch.bfloat16)
    gen = torch.Generator(device=dev).manual_seed(1)
    cache.k.normal_(0.0, 1.0, generator=gen)
    cache.v.normal_(0.0, 1.0, generator=gen)
    cos, sin = rope_tables(config, max_context, dev)
    token = torch.tensor([1234], device=dev)
    pos = torch.zeros(1, dtype=torch.int32, device=dev)
    ops = KernelOps(KernelConfig.for_device(dev))
    persistent = PersistentLayers(w, cache, cos, sin, token, pos)
    methods = {'persistent': lambda: persistent().clone(),
               'per-op': lambda: decode_layers(w, cache, token, pos, cos, sin, ops).clone(),
               'torch': lambda: decode_layers(w, cache, token, pos, cos, sin, ops_torch).clone()}
    worst = 0.0
    for p in sorted({0, 1, 63, 64, 65, 127, 128, 200, 1000, 2047, 4095, max_context - 1}):
        if p >= max_context:
            continue
        pos.fill_(p)
        saved = cache.k[:, :, p].clone(), cache.v[:, :, p].clone()
        out = {}
        for name, fn in methods.items():
            cache.k[:, :, p] = saved[0]
            cache.v[:, :, p] = saved[1]
            x = fn()
            torch.cuda.synchronize()
            out[name] = (x, cache.k[:, :, p].clone(), cache.v[:, :, p].clone())
        ref = out['torch']
        line = []
        for name in ('persistent', 'per-op'):
            errs = [rel(a, b) for a, b in zip(out[name], ref)]
            line.append(f'{name} x {errs[0]:.2e} k {errs[1]:.2e} v {errs[2]:.2e}')
            if name == 'persistent':
                worst = max(worst, errs[0])
        print(f'  pos {p:>5}: ' + '; '.join(line), flush=True)
    token.fill_(77)
    for p in (2047, max_context - 1):   # layers alone, graphed, at a short and a long context
        if p >= max_context:
            continue
        pos.fill_(p)
        graphs = {'per-op': graphed(lambda: decode_layers(w, cache, token, pos, cos, sin, ops)),
                  'persistent': graphed(persistent)}
        for rnd in range(3):
            items = list(graphs.items())
            for name, g in (items if rnd % 2 == 0 else items[::-1]):
                pos.fill_(p)
                print(f'  ctx {p + 1:>5} round {rnd} {name:>10}: {timed(g):.3f} ms', flush=True)
    methods = graphs = persistent = cache = w = None   # free this shape before the next
    torch.cuda.empty_cache()
