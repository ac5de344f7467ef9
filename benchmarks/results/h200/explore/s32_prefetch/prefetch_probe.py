"""
Session 32: GEMVs whose blocks load their whole weight slice into shared memory before the wait.

prefetch_gemv.cu (v37): one block an SM owns ceil(N / SMs) consecutive rows, bulk-copies them
into shared memory (TMA, one mbarrier a group of 8 rows) as soon as it is placed, then waits for
the previous kernel (PDL), takes its input and sums its rows from shared memory. Where the
package's GEMV has one or two tiles in flight a program when its wait returns, this one has its
whole slice requested, so the boundary's idle HBM goes and the GEMV after the wait is an L2 round
trip and arithmetic. It fits where the slice fits in a block's shared memory: o_proj on the 1B,
Qwen2.5-1.5B and the 3B, QKV on the 1B and Qwen2.5-1.5B. The arms (PrefetchOps: the package's
ops, with these GEMVs swapped): o_proj, QKV, both. First each kernel against torch (float64) for
each shape, then each arm's logits and token against the package's, then the step (layers and
greedy head, graphed) in interleaved rounds (relaxed_probe's GreedyModel and check_and_time).
With WINDOWS=1 (run 2) the arms are o_proj prefetched, o_proj with its copies issued after the
wait, and o_proj prefetched with the largest carveout; the first two are also stamped
(%globaltimer in every block: placed, released, done) in a replay of their own, to see where the
time goes.
Usage: prefetch_probe.py ARCH:CTX[,CTX]... (PYTHONPATH the repository root)
"""
import ctypes
import os
from pathlib import Path
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
for probe in ('s14_timeline', 's28_flags', 's30_mlp'):
    sys.path.insert(0, os.path.join(HERE, '..', probe))
from physinf_ros.engine import kernels  # noqa: E402
from physinf_ros.engine.cuda_library import Library  # noqa: E402
from relaxed_probe import check_and_time, GreedyModel, step_ms  # noqa: E402
import torch  # noqa: E402

SOURCE = Path(HERE) / 'prefetch_gemv.cu'
SMEM_LIMIT = 232448        # a block's opt-in shared memory on an H100 / H200
KS = (1536, 2048, 3072, 4096)
WINDOWS = os.environ.get('WINDOWS') == '1'   # run 2: loads after the wait, and stamps


def declare(handle):
    handle.prefetch_gemv_smem.restype = ctypes.c_longlong
    handle.prefetch_gemv_smem.argtypes = [ctypes.c_int, ctypes.c_int]
    handle.prefetch_gemv_launch.restype = ctypes.c_int
    handle.prefetch_gemv_launch.argtypes = ([ctypes.c_void_p] * 5 + [ctypes.c_int] * 3
                                            + [ctypes.c_float, ctypes.c_int, ctypes.c_void_p,
                                               ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
                                               ctypes.c_int])


class Prefetch:
    """The built library and its launch shape per (N, K)."""

    def __init__(self, dev):
        self.lib = Library(SOURCE, torch.cuda.get_device_capability(dev), declare)
        assert self.lib.handle is not None, self.lib.reason
        self.sms = torch.cuda.get_device_properties(dev).multi_processor_count

    def rows(self, n, k):
        """Return the rows a block takes, or 0 where they do not fit in its shared memory."""
        rows = -(-n // self.sms)
        fits = k in KS and self.lib.handle.prefetch_gemv_smem(rows, k) <= SMEM_LIMIT
        return rows if fits else 0

    def gemv(self, w, x, y, norm_w, bias, eps, accumulate, after_wait=False, stamps=None,
             carveout=-1):
        n, k = w.shape
        code = self.lib.handle.prefetch_gemv_launch(
            w.data_ptr(), x.data_ptr(), norm_w.data_ptr() if norm_w is not None else None,
            bias.data_ptr() if bias is not None else None, y.data_ptr(), n, k, self.rows(n, k),
            eps, int(accumulate), torch.cuda.current_stream().cuda_stream, 1, int(after_wait),
            stamps.data_ptr() if stamps is not None else None, carveout)
        assert code == 0, f'prefetch_gemv launch failed: cuda error {code}'


class PrefetchOps(kernels.KernelOps):
    """The package's ops with o_proj and / or QKV on prefetch_gemv where they fit."""

    def __init__(self, config, prefetch, o_proj, qkv, after_wait=False, layers=0, carveout=-1):
        super().__init__(config)
        self.prefetch, self.o_proj, self.qkv = prefetch, o_proj, qkv
        self.after_wait, self.carveout = after_wait, carveout
        # layers > 0: o_proj's blocks stamp %globaltimer (placed, released, done), a row a layer
        self.stamps = torch.zeros(layers, 256, 3, dtype=torch.int64, device='cuda') \
            if layers else None
        self.calls = 0

    def rms_matvec(self, x, norm_w, w, bias, eps, out=None):
        if self.qkv and self.prefetch.rows(*w.shape):
            y = torch.empty(w.shape[0], device=x.device, dtype=torch.float32) if out is None \
                else out
            self.prefetch.gemv(w, x, y, norm_w, bias, eps, False)
            return y
        return super().rms_matvec(x, norm_w, w, bias, eps, out)

    def matvec_add(self, x, a, w):
        if self.o_proj and w.shape[0] == w.shape[1] and self.prefetch.rows(*w.shape):
            stamps = None
            if self.stamps is not None:
                stamps = self.stamps[self.calls % self.stamps.shape[0]]
                self.calls += 1
            self.prefetch.gemv(w, a, x, None, None, 0.0, True, self.after_wait, stamps,
                               self.carveout)
            return
        super().matvec_add(x, a, w)


def check_kernel(prefetch, model):
    """Print each swapped GEMV of layer 0 against float64 torch, and the package's too."""
    c, layer, dev = model.config, model.w.layers[0], model.token.device
    gen = torch.Generator(device=dev).manual_seed(2)
    x = torch.randn(c.hidden_size, device=dev, generator=gen)
    a = torch.randn(c.hidden_size, device=dev, generator=gen)
    ops = kernels.KernelOps(kernels.KernelConfig.for_device(dev))
    cases = []
    if prefetch.rows(*layer.wo.shape):
        base = torch.randn(c.hidden_size, device=dev, generator=gen)
        ref = base.double() + layer.wo.double() @ a.to(torch.bfloat16).double()
        mine, pkg = base.clone(), base.clone()
        prefetch.gemv(layer.wo, a, mine, None, None, 0.0, True)
        ops.matvec_add(pkg, a, layer.wo)
        cases.append(('o_proj', layer.wo, ref, mine, pkg))
    if prefetch.rows(*layer.wqkv.shape):
        eps = c.rms_norm_eps
        xn = x.double() * torch.rsqrt(x.double().pow(2).mean() + eps) * layer.attn_norm.double()
        ref = layer.wqkv.double() @ xn
        if layer.bqkv is not None:
            ref += layer.bqkv.double()
        mine = torch.empty(layer.wqkv.shape[0], device=dev)
        prefetch.gemv(layer.wqkv, x, mine, layer.attn_norm, layer.bqkv, eps, False)
        pkg = ops.rms_matvec(x, layer.attn_norm, layer.wqkv, layer.bqkv, eps)
        cases.append(('qkv', layer.wqkv, ref, mine, pkg))
    torch.cuda.synchronize()
    for name, w, ref, mine, pkg in cases:
        errors = [((y.double() - ref).norm() / ref.norm()).item() for y in (mine, pkg)]
        print(f'  {name} {tuple(w.shape)}: {prefetch.rows(*w.shape)} rows a block, error vs '
              f'float64 {errors[0]:.2e} (package {errors[1]:.2e})', flush=True)


def windows(model, ops, ctx):
    """Return o_proj's windows a layer (layers 1..) as text: medians over layers, us."""
    step_ms(model, ops, ctx)   # captured and replayed: the stamps are the last replay's
    torch.cuda.synchronize()
    blocks = -(-model.config.hidden_size // ops.prefetch.rows(*model.w.layers[0].wo.shape))
    t = ops.stamps[1:, :blocks].double() / 1e3
    placed, released, done = t[..., 0], t[..., 1], t[..., 2]
    first = released.min(1).values
    spans = {'first placed -> first released': first - placed.min(1).values,
             'last placed -> first released': first - placed.max(1).values,
             'released spread': released.max(1).values - first,
             'first released -> last done': done.max(1).values - first,
             'last done -> next first placed': placed.min(1).values[1:] - done.max(1).values[:-1],
             'blocks placed after first release': (placed > first[:, None]).sum(1).double()}
    return ', '.join(f'{k} {v.median().item():.2f}' for k, v in spans.items())


def main():
    dev = torch.device('cuda')
    config = kernels.KernelConfig.for_device(dev)
    prefetch = Prefetch(dev)
    for spec in sys.argv[1:]:
        arch, contexts = spec.split(':')
        contexts = [int(c) for c in contexts.split(',')]
        model = GreedyModel(arch, max(contexts) + 64, dev)
        print(f'{arch}:', flush=True)
        check_kernel(prefetch, model)
        arms = {'package': kernels.KernelOps(config),
                'o_proj prefetched': PrefetchOps(config, prefetch, True, False)}
        if WINDOWS:
            arms['o_proj loads after wait'] = PrefetchOps(config, prefetch, True, False, True)
            arms['o_proj prefetched, carveout 100'] = PrefetchOps(config, prefetch, True, False,
                                                                  carveout=100)
        elif prefetch.rows(*model.w.layers[0].wqkv.shape):
            arms['qkv prefetched'] = PrefetchOps(config, prefetch, False, True)
            arms['both prefetched'] = PrefetchOps(config, prefetch, True, True)
        for ctx in contexts:
            check_and_time(model, arms, arch, ctx, 24)
            layers = model.config.num_layers
            for after in (False, True) if WINDOWS else ():
                ops = PrefetchOps(config, prefetch, True, False, after, layers)
                print(f'  o_proj windows, us ({"after" if after else "before"} the wait): '
                      f'{windows(model, ops, ctx)}', flush=True)
        del model, arms
        torch.cuda.empty_cache()


if __name__ == '__main__':
    main()
