"""
Where a persistent step spends its time: per phase, each block's work and its grid wait.

It builds make_stamps.py's stamped persistent_layers.cu: thread 0 of each block reads the global
timer before and after each grid wait and at marks inside each phase.
EXTRA_FLAGS adds -D flags to its build. Usage: stamps.py ARCH CTX...
"""
import ctypes
import os
from pathlib import Path
import sys
import tempfile

from make_stamps import MAX_BLOCKS, stamped_source, STAMPS_PER_BLOCK
import persistent
from physinf_ros.engine.llama import (from_state_dict, KVCache, ModelConfig, rope_tables,
                                      synthetic_state_dict)
from physinf_ros.engine.models import synthetic_config
import torch


persistent.SOURCE = Path(tempfile.mkdtemp()) / 'persistent_stamps.cu'
persistent.SOURCE.write_text(stamped_source())
extra = tuple(os.environ.get('EXTRA_FLAGS', '').split())   # a variant's -D flags
build = persistent.build
persistent.build = lambda source, flags, tag: build(source, tuple(flags) + extra, tag)
dev = torch.device('cuda')
arch = sys.argv[1]
contexts = [int(c) for c in sys.argv[2:]]
config = ModelConfig.from_hf(synthetic_config(arch))
w = from_state_dict(config, synthetic_state_dict(config, dev, torch.bfloat16), dev,
                    torch.bfloat16)
cache = KVCache.allocate(config, max(contexts), dev, torch.bfloat16)
cache.k.normal_()
cache.v.normal_()
cos, sin = rope_tables(config, max(contexts), dev)
token = torch.tensor([1234], device=dev)
pos = torch.zeros(1, dtype=torch.int32, device=dev)
pl = persistent.PersistentLayers(w, cache, cos, sin, token, pos)
fn = pl._lib.physinf_stamps
fn.argtypes = [ctypes.c_void_p]
host = (ctypes.c_ulonglong * (MAX_BLOCKS * STAMPS_PER_BLOCK))()
names = ('qkv', 'attn', 'o', 'mlp', 'down')
L = config.num_layers
for ctx in contexts:
    pos.fill_(ctx - 1)
    for _ in range(5):
        pl()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(20):
        a.record()
        pl()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    print(f'{arch} ctx {ctx} {" ".join(extra)}: median of 20 launches {sorted(times)[10]:.3f} ms')
    assert fn(ctypes.addressof(host)) == 0
    t = torch.tensor(list(host), dtype=torch.float64)
    t = t.view(MAX_BLOCKS, STAMPS_PER_BLOCK)[:pl.blocks]
    phases = 5 * L
    t = t[:, :8 * phases + 8].view(pl.blocks, phases + 1, 8)
    t0 = t[:, 0, 1].min()
    t = (t - t0) / 1e3   # us from the first block's start
    end = t[:, phases, 0]
    print(f'{arch} ctx {ctx}: kernel {end.max().item():.1f} us (first block start to last end); '
          f'{pl.blocks} blocks')
    # Marks: 0 before the phase's grid wait, 1 after it, 2.. inside (see make_stamps.py);
    # each as us after mark 1, averaged over the blocks that recorded it and over layers.
    start_ = t[:, :phases, 1]
    done = t[:, 1:, 0]   # the next phase's mark 0: this phase's end
    marks = {2: 'input', 3: 'gemv/keys', 4: 'new key', 5: 'merged', 6: 'counted', 7: 'head merge'}
    for i, name in enumerate(names):
        cols = list(range(i, phases, 5))
        line = [f'wait {(t[:, cols, 1] - t[:, cols, 0]).mean().item() if i or L > 1 else 0:5.2f}']
        for k, label in marks.items():
            v = t[:, cols, k] - start_[:, cols]
            ok = (t[:, cols, k] > 0) & (t[:, cols, k] < end.max())
            if ok.sum() > 0:
                line.append(f'{label} {v[ok].mean().item():6.2f}')
        line.append(f'end {(done[:, cols] - start_[:, cols]).mean().item():6.2f}')
        print(f'  {name:>5}: ' + ', '.join(line) + ' us')
    per_layer = (t[:, 5::5, 0].max(0).values[1:] - t[:, 5::5, 0].max(0).values[:-1]).mean()
    print(f'  a layer: {per_layer.item():.2f} us')
