"""Time PersistentLayers against the per-op layers, both in CUDA graphs, on a few layers."""
import os
from pathlib import Path
import sys

from physinf_ros.engine import persistent
from physinf_ros.engine.kernels import KernelConfig, KernelOps
from physinf_ros.engine.llama import (decode_layers, from_state_dict, KVCache, ModelConfig,
                                      rope_tables, synthetic_state_dict)
from physinf_ros.engine.models import synthetic_config
import torch

if os.environ.get('PROBE_SOURCE'):   # a variant of persistent_step.cu
    persistent.SOURCE = Path(os.environ['PROBE_SOURCE'])
arch = sys.argv[1] if len(sys.argv) > 1 else 'llama-3.2-1b'
layers = int(sys.argv[2]) if len(sys.argv) > 2 else 4
ctx = int(sys.argv[3]) if len(sys.argv) > 3 else 2048
dev = torch.device('cuda')
hf = synthetic_config(arch)
hf.update(num_hidden_layers=layers, vocab_size=1000)
c = ModelConfig.from_hf(hf)
w = from_state_dict(c, synthetic_state_dict(c, dev, torch.bfloat16), dev, torch.bfloat16)
cache = KVCache.allocate(c, ctx + 64, dev, torch.bfloat16)
cos, sin = rope_tables(c, ctx + 64, dev)
pos = torch.tensor([ctx - 1], dtype=torch.int32, device=dev)
token = torch.tensor([3], device=dev)
step = persistent.PersistentLayers(w, cache, dev)
ops = KernelOps(KernelConfig(persistent=False))
ref = decode_layers(w, cache, token, pos, cos, sin, ops).clone()
out = step(w, cache, token, pos, cos, sin)
print(f'{arch} x{layers} ctx {ctx}: rel error against the per-op kernels',
      f'{((out - ref).norm() / ref.norm()).item():.2e}')
layer_bytes = sum(t.numel() * 2 for t in (w.layers[0].wqkv, w.layers[0].wo,
                                          w.layers[0].w_gate_up, w.layers[0].w_down))
gb = layers * (layer_bytes + 2 * cache.k[0].numel() * 2 * ctx / (ctx + 64)) / 1e9
for name, fn in (('persistent', lambda: step(w, cache, token, pos, cos, sin)),
                 ('per-op', lambda: decode_layers(w, cache, token, pos, cos, sin, ops))):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    for _ in range(5):
        graph.replay()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(30):
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    print(f'  {name} graphed: {times[15]:.3f} ms median ({times[0]:.3f}-{times[-1]:.3f}), '
          f'{gb / times[15]:.2f} TB/s')
