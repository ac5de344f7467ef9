"""
A/B of attention settings in the package's per-op step: each arm checked, then timed.

Arms are KernelConfigs (this GPU's kernels.yaml entry with flags set, as an A/B builds them).
For each model shape (random weights, a cache of random keys and values): at several
positions, each arm's residual after all layers and the key and value it stores at pos,
against ops_torch on the same cache. Then the layers and the head (RMSNorm + lm_head GEMV),
graphed, at ctx 2048 and MAX_CONTEXT, every arm in each of ROUNDS interleaved rounds.
Usage: probe.py MAX_CONTEXT ARCH... (arms in ARMS: ';'-separated, space-separated NAME=VALUE)
With KERNELS="NAME=PATH;..." (other kernels.py files, e.g. `git show REV:physinf_ros/engine/
kernels.py`), arm NAME runs that file's kernels with its own configuration for this GPU: an A/B
of code.
"""
import importlib.util
import os
import statistics
import sys

from physinf_ros.bench.attention import _time_cuda_graph
from physinf_ros.engine import ops_torch
from physinf_ros.engine.kernels import KernelConfig, KernelOps
from physinf_ros.engine.llama import (decode_layers, from_state_dict, KVCache, ModelConfig,
                                      rope_tables, synthetic_state_dict)
from physinf_ros.engine.models import synthetic_config
import torch


dev = torch.device('cuda')
max_context = int(sys.argv[1])
ROUNDS = int(os.environ.get('ROUNDS', '3'))
base = KernelConfig.for_device(dev)
arms = {}
DEFAULT_ARMS = 'attention.merge_in_split=0;attention.merge_in_split=1'
for arm in os.environ.get('ARMS', DEFAULT_ARMS).split(';'):
    config = base
    for flag in arm.split():
        if '=' not in flag:   # a plain name: the arm runs this GPU's configuration as it is
            continue
        name, value = flag.split('=')
        config = config.with_flag(name, value)
    arms[arm] = KernelOps(config)
for arm in filter(None, os.environ.get('KERNELS', '').split(';')):
    name, path = arm.split('=')
    spec = importlib.util.spec_from_file_location(f'physinf_ros.engine.kernels_{name}', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    arms[name] = module.KernelOps(module.KernelConfig.for_device(dev))


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


for arch in sys.argv[2:]:
    config = ModelConfig.from_hf(synthetic_config(arch))
    w = from_state_dict(config, synthetic_state_dict(config, dev, torch.bfloat16), dev,
                        torch.bfloat16)
    cache = KVCache.allocate(config, max_context, dev, torch.bfloat16)
    gen = torch.Generator(device=dev).manual_seed(1)
    cache.k.normal_(0.0, 1.0, generator=gen)
    cache.v.normal_(0.0, 1.0, generator=gen)
    cos, sin = rope_tables(config, max_context, dev)
    token = torch.tensor([1234], device=dev)
    pos = torch.zeros(1, dtype=torch.int32, device=dev)
    logits = torch.empty(config.vocab_size, device=dev)
    print(f'{arch}', flush=True)
    methods = {'torch': ops_torch, **arms}
    for p in sorted({0, 1, 127, 128, 1000, 2047, 4095, max_context - 1}):
        if p >= max_context:
            continue
        pos.fill_(p)
        saved = cache.k[:, :, p].clone(), cache.v[:, :, p].clone()
        out = {}
        for name, ops in methods.items():
            cache.k[:, :, p] = saved[0]
            cache.v[:, :, p] = saved[1]
            x = decode_layers(w, cache, token, pos, cos, sin, ops).clone()
            torch.cuda.synchronize()
            out[name] = (x, cache.k[:, :, p].clone(), cache.v[:, :, p].clone())
        errs = ['{}: x {:.2e} k {:.2e} v {:.2e}'.format(
            name, *[rel(a, b) for a, b in zip(out[name], out['torch'])]) for name in arms]
        print(f'  pos {p:>5}: ' + '; '.join(errs), flush=True)
    token.fill_(77)
    for p in sorted({2047, max_context - 1}):

        def step(ops):
            x = decode_layers(w, cache, token, pos, cos, sin, ops)
            ops.rms_matvec(x, w.norm, w.lm_head, None, config.rms_norm_eps, out=logits)

        times = {name: [] for name in arms}
        for rnd in range(ROUNDS):
            names = list(arms) if rnd % 2 == 0 else list(arms)[::-1]
            for name in names:
                pos.fill_(p)
                ms = statistics.median(_time_cuda_graph(lambda: step(arms[name]), 50)) * 1e3
                times[name].append(ms)
        for name, ms in times.items():
            print(f'  ctx {p + 1:>5} {name:>40}: ' + ' '.join(f'{t:.3f}' for t in ms)
                  + f' ms (median {statistics.median(ms):.3f})', flush=True)
    methods = cache = w = None   # free this shape before the next
    torch.cuda.empty_cache()
