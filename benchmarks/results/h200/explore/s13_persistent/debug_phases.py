"""
Locate a wrong phase of persistent_layers.cu: one layer, its buffers against torch.

Usage: debug_phases.py ARCH POS...
"""
import sys

from persistent import PersistentLayers
from physinf_ros.engine import ops_torch
from physinf_ros.engine.llama import (from_state_dict, KVCache, ModelConfig, rms_norm,
                                      rope_tables, synthetic_state_dict)
from physinf_ros.engine.models import synthetic_config
import torch
import torch.nn.functional as F

dev = torch.device('cuda')
arch = sys.argv[1]
config = ModelConfig.from_hf(synthetic_config(arch))
w = from_state_dict(config, synthetic_state_dict(config, dev, torch.bfloat16), dev,
                    torch.bfloat16)
cache = KVCache.allocate(config, 4096, dev, torch.bfloat16)
gen = torch.Generator(device=dev).manual_seed(1)
cache.k.normal_(0.0, 1.0, generator=gen)
cache.v.normal_(0.0, 1.0, generator=gen)
cos, sin = rope_tables(config, 4096, dev)
token = torch.tensor([1234], device=dev)
pos = torch.zeros(1, dtype=torch.int32, device=dev)
pl = PersistentLayers(w, cache, cos, sin, token, pos)
pl._args.num_layers = 1
qkv_buf, attn_buf, mlp_buf, _ = pl._buffers


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


eps = config.rms_norm_eps
layer = w.layers[0]
for p in map(int, sys.argv[2:]):
    pos.fill_(p)
    saved = cache.k[0, :, p].clone(), cache.v[0, :, p].clone()
    pl()
    torch.cuda.synchronize()
    k_p = cache.k[0, :, p].clone()
    cache.k[0, :, p] = saved[0]
    cache.v[0, :, p] = saved[1]
    x = w.embed[token].float().view(-1)
    qkv = F.linear(rms_norm(x, layer.attn_norm, eps), layer.wqkv).float()
    attn = ops_torch.rope_attention(qkv, pos, cos, sin, cache.k[0], cache.v[0],
                                    config.num_heads)
    k_ref = cache.k[0, :, p].clone()
    h1 = x + F.linear(attn.to(torch.bfloat16), layer.wo).float()
    g, u = F.linear(rms_norm(h1, layer.mlp_norm, eps), layer.w_gate_up).float().chunk(2)
    mlp = F.silu(g) * u
    h2 = h1 + F.linear(mlp.to(torch.bfloat16), layer.w_down).float()
    print(f'pos {p}: qkv {rel(qkv_buf, qkv):.2e} attn {rel(attn_buf, attn):.2e} '
          f'k@pos {rel(k_p, k_ref):.2e} mlp {rel(mlp_buf, mlp):.2e} h {rel(pl.h, h2):.2e}')
    print('   qkv', qkv_buf[:4].tolist(), qkv[:4].tolist())
    print('   attn', attn_buf[:4].tolist(), attn[:4].tolist())
    print('   k', k_p[0, :4].tolist(), k_ref[0, :4].tolist())
    cache.k[0, :, p] = saved[0]
    cache.v[0, :, p] = saved[1]
    print('   counters', pl._counters.tolist())
