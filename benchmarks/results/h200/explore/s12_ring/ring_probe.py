"""
Time a persistent GEMV chain fed by a TMA weight ring against the per-op kernels.

ring_probe.cu and the package's kernels run the same weights, both in CUDA graphs: a model's
four layer GEMVs (QKV, o_proj, gate/up, down) over all its layers, without attention.
Usage: ring_probe.py ARCH LIBS...
"""
import ctypes
import sys

from physinf_ros.engine.kernels import KernelConfig, KernelOps
from physinf_ros.engine.models import synthetic_config
from physinf_ros.measurement.targets import measure_copy_bandwidth
import torch

dev = torch.device('cuda')
arch, libs = sys.argv[1], sys.argv[2:]
hf = synthetic_config(arch)
hidden, inter, layers = hf['hidden_size'], hf['intermediate_size'], hf['num_hidden_layers']
head_dim = hf.get('head_dim') or hidden // hf['num_attention_heads']
qkv_rows = (hf['num_attention_heads'] + 2 * hf['num_key_value_heads']) * head_dim
gen = torch.Generator(device=dev).manual_seed(0)


def weight(n, k):
    return (torch.randn(n, k, device=dev, generator=gen) * k ** -0.5).to(torch.bfloat16)


ws = [(weight(qkv_rows, hidden), weight(hidden, hidden), weight(2 * inter, hidden),
       weight(hidden, inter)) for _ in range(layers)]
layer_bytes = sum(t.numel() * 2 for t in ws[0])
x0 = torch.randn(hidden, device=dev, generator=gen)
qkv, o, h, d = (torch.empty(n, device=dev) for n in (qkv_rows, hidden, inter, hidden))


class Phase(ctypes.Structure):
    _fields_ = [('w', ctypes.c_void_p), ('x', ctypes.c_void_p), ('y', ctypes.c_void_p),
                ('n', ctypes.c_int), ('k', ctypes.c_int), ('gate_up', ctypes.c_int)]


phases = []
for i, (wqkv, wo, wgu, wd) in enumerate(ws):
    phases += [Phase(wqkv.data_ptr(), (x0 if i == 0 else d).data_ptr(), qkv.data_ptr(),
                     qkv_rows, hidden, 0),
               Phase(wo.data_ptr(), qkv.data_ptr(), o.data_ptr(), hidden, hidden, 0),
               Phase(wgu.data_ptr(), o.data_ptr(), h.data_ptr(), inter, hidden, 1),
               Phase(wd.data_ptr(), h.data_ptr(), d.data_ptr(), hidden, inter, 0)]
table = (Phase * len(phases))(*phases)
table_dev = torch.frombuffer(bytearray(table), dtype=torch.uint8).to(dev)
counter = torch.zeros(1, dtype=torch.int32, device=dev)
sms = torch.cuda.get_device_properties(dev).multi_processor_count


def reference():
    """Run the chain in torch: inputs rounded to bf16, float32 sums, silu in float32."""
    x, outs = x0, []
    for wqkv, wo, wgu, wd in ws:
        q = wqkv.float() @ x.bfloat16().float()
        oo = wo.float() @ q[:hidden].bfloat16().float()
        g, u = (wgu.float() @ oo.bfloat16().float()).chunk(2)
        hh = torch.nn.functional.silu(g) * u
        x = wd.float() @ hh.bfloat16().float()
        outs.append((q, oo, hh, x))
    return outs


def ring_step(lib, num_phases=len(phases)):
    def step():
        code = lib.ring_launch(ctypes.c_void_p(table_dev.data_ptr()), num_phases,
                               ctypes.c_void_p(counter.data_ptr()), sms,
                               ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
        if code:
            raise RuntimeError(lib.ring_error(code).decode())
    return step


ops = KernelOps(KernelConfig.for_device(dev))
norm_hidden = torch.ones(hidden, device=dev, dtype=torch.bfloat16)
resid = torch.empty(hidden, device=dev)


def per_op_step():
    resid.copy_(x0)
    for wqkv, wo, wgu, wd in ws:
        q = ops.rms_matvec(resid, norm_hidden, wqkv, None, 1e-5)
        ops.matvec_add(resid, q[:hidden], wo)
        hh = ops.rms_gate_up_silu(resid, norm_hidden, wgu, 1e-5)
        ops.matvec_add(resid, hh, wd)


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


def timed(graph, replays=30):
    for _ in range(3):
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


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


copy = measure_copy_bandwidth(dev)
gb = layers * layer_bytes / 1e9
print(f'{arch}: {layers} layers x 4 GEMVs, {layer_bytes / 1e6:.1f} MB a layer, {gb:.2f} GB; '
      f'copy rate {copy / 1e3:.2f} TB/s -> {gb / copy * 1e3:.3f} ms; {sms} SMs')
ref = reference()
variants = {}
for path in libs:
    lib = ctypes.CDLL(path)
    lib.ring_error.restype = ctypes.c_char_p
    # The first layer alone: further down the chain its values underflow (silu(g) * u roughly
    # squares them each layer), and a relative error of zeros is 0 / 0.
    ring_step(lib, 4)()
    torch.cuda.synchronize()
    errors = [rel(t, r) for t, r in zip((qkv, o, h, d), ref[0])]
    print(f'  {path.split("/")[-1]} ({lib.ring_smem_bytes() // 1024} KB shared): rel error of '
          f'the first layer (qkv, o, h, d) against torch: '
          + ', '.join(f'{e:.1e}' for e in errors))
    step = ring_step(lib)
    variants[path.split('/')[-1]] = graphed(step)
variants['per-op'] = graphed(per_op_step)
for rnd in range(3):
    for name, graph in (variants.items() if rnd % 2 == 0 else reversed(variants.items())):
        ms = timed(graph)
        print(f'  round {rnd} {name:>12}: {ms:.3f} ms, {ms / layers * 1e3:.1f} us a layer, '
              f'{gb / ms:.2f} TB/s ({gb / ms / copy * 1e3:.0%} of copy)')
