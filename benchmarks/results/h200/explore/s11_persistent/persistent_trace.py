"""Where a persistent step's time goes: %globaltimer per phase event, per block (PHYSINF_TRACE)."""
import ctypes
from pathlib import Path
import sys
import tempfile

import numpy as np
from physinf_ros.engine import persistent
from physinf_ros.engine.llama import from_state_dict, KVCache, ModelConfig, rope_tables, \
    synthetic_state_dict
from physinf_ros.engine.models import synthetic_config
import torch

traced = Path(tempfile.gettempdir()) / 'persistent_traced.cu'
traced.write_text('#define PHYSINF_TRACE\n' + persistent.SOURCE.read_text())
persistent.SOURCE = traced
arch = sys.argv[1] if len(sys.argv) > 1 else 'llama-3.1-8b'
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
for _ in range(10):
    step(w, cache, token, pos, cos, sin)
torch.cuda.synchronize()
EVENTS, LAYERS, BLOCKS = 24, 8, 160
buf = np.zeros(BLOCKS * LAYERS * EVENTS, dtype=np.uint64)
lib = persistent.library(dev).handle
assert lib.physinf_persistent_trace(buf.ctypes.data_as(ctypes.c_void_p), buf.nbytes) == 0
t = buf.reshape(BLOCKS, LAYERS, EVENTS)[:step.blocks, :layers].astype(np.float64) / 1000.0
names = ['QKV barrier', 'QKV prepare', 'QKV gemv', 'QKV epilogue, kv issue', 'ATTN barrier',
         'attention, o_proj loads', 'OPROJ barrier', 'OPROJ prepare', 'OPROJ gemv',
         'OPROJ epilogue, loads', 'GATE_UP barrier', 'GATE_UP prepare', 'GATE_UP gemv',
         'GATE_UP epilogue, loads', 'DOWN barrier', 'DOWN prepare', 'DOWN gemv',
         'DOWN epilogue, loads']
print(f'{arch} x{layers} ctx {ctx}, {step.blocks} blocks; us, layers 1..{layers - 1}: '
      'mean / max over blocks')
seg = t[:, 1:, 1:19] - t[:, 1:, 0:18]
for i, name in enumerate(names):
    print(f'  {name:26s} {seg[:, :, i].mean():8.2f} {seg[:, :, i].max(axis=0).mean():8.2f}')
layer_us = t[0, 2:, 0] - t[0, 1:-1, 0] if layers > 2 else t[0, 1:, 18] - t[0, 1:, 0]
print(f"  layer (block 0, event 0 to the next layer's) {np.mean(layer_us):.2f} us")
