"""
Session 26: a CUDA split kernel's op table in the step, from the same stamps as the Triton's.

Builds each CUDA split kernel (SOURCES: space-separated NAME=PATH[:FLAG,...], after the colon nvcc
flags such as -DMIN_BLOCKS=3, or min_chunk=N for the launch's minimum keys a split, or splits=N for
its grid's splits a kv head (and the reduce's; kernels.yaml's if not given), or masked=1 for a
reduce kernel that reads only the splits holding keys (no stamped table), or fused=1 for a source
whose physinf_split_fused merges the splits itself (split_merge.cu: no reduce kernel after it, and
a stamped table of five ops a layer); default cuda=split_cuda.cu here) twice with nvcc, plain and
with -DMARKS (it then writes session 14's timeline.py stamps: the wait reached, released, end, and
its marks inside). Then, per ARCH:CTX: (1) its attention and the Triton kernels' against float32
(split_cuda_probe.check); (2) the step (layers and head, graphed, unstamped) with the package's
kernels on the Triton split (attention cuda off: timeline.triton_config) and with each CUDA split
before the package's Triton reduce (or none, fused), split_cuda_probe.time_arms' interleaved
rounds; (3) each arm's stamped step: timeline.py's per-op table, and layer 1's split programs from
their own release (medians), the split holding pos, the others with keys, those without, with when
they reached the wait and were released (median and last, from the first release). An arm without
min_chunk takes kernels.yaml's (since v31, 64 for the 8-kv-head shapes of head size 128; runs 2-4
ran with 128 there).
Usage: [SOURCES=...] cuda_timeline.py ARCH:CTX[,CTX]... (PYTHONPATH the repository root)
"""
import ctypes
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 's14_timeline'))
sys.path.insert(0, os.path.join(HERE, '..', 's25_warp_keys'))
from physinf_ros.engine import kernels  # noqa: E402
from split_cuda_probe import check, time_arms  # noqa: E402
from timeline import (LAUNCHES, Model, NAMES, op_rows, print_table, SLOT,  # noqa: E402
                      stamped_module, stamped_windows, triton_config, WIDTH)
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait  # noqa: E402


@triton.jit
def _masked_reduce(MAXS, SUMS, ACCS, OUT, POS, group, KEY_SPLITS: tl.constexpr,
                   MIN_CHUNK: tl.constexpr, TILE: tl.constexpr, D: tl.constexpr,
                   GROUP_P: tl.constexpr, SPLITS: tl.constexpr):
    # kernels._attn_reduce_kernel reading only the splits that hold keys (the others' partials
    # weigh nothing): their count from pos, read before the wait as the split kernel reads it.
    length = tl.load(POS) + 1
    chunk = tl.cdiv(tl.maximum(tl.cdiv(length, KEY_SPLITS), MIN_CHUNK), TILE) * TILE
    used = tl.cdiv(length, chunk)
    gdc_wait()
    gdc_launch_dependents()
    head = tl.program_id(0)
    d = tl.arange(0, D)
    split = tl.arange(0, SPLITS)
    live = split < used
    index = ((head // group) * SPLITS + split) * GROUP_P + head % group
    m = tl.load(MAXS + index, mask=live, other=float('-inf'))
    weight = tl.exp(m - tl.max(m, axis=0))
    total = tl.sum(tl.load(SUMS + index, mask=live, other=0.0) * weight, axis=0)
    acc = tl.load(ACCS + index[:, None] * D + d[None, :], mask=live[:, None], other=0.0)
    tl.store(OUT + head * D + d, tl.sum(acc * weight[:, None], axis=0) / total)


def build(source: str, marks: bool) -> ctypes.CDLL:
    """Compile source (PATH[:FLAG,...]) with nvcc and load it."""
    path, _, flags = source.partition(':')
    out = os.path.join(tempfile.mkdtemp(), 'split_cuda.so')
    subprocess.run(['nvcc', '-O3', '-std=c++17', '-arch=sm_90a', '-shared', '-Xcompiler',
                    '-fPIC', *(['-DMARKS'] if marks else []),
                    *(f for f in flags.split(',') if f.startswith('-')), path, '-o', out],
                   check=True)
    lib = ctypes.CDLL(out)
    lib.physinf_split_error.restype = ctypes.c_char_p
    return lib


def cuda_split_ops(module, lib, source):
    """Return a KernelOps of module (kernels, or timeline's stamped copy) with lib's split."""
    settings = dict(f.split('=') for f in source.partition(':')[2].split(',')
                    if f and not f.startswith('-'))
    fused = settings.get('fused') == '1'
    masked = settings.get('masked') == '1'
    key_splits = [int(f.split('=')[1]) for f in source.split(',') if f.startswith('-DKEY_SPLITS=')]

    class CudaSplitOps(module.KernelOps):
        counters = None   # a fused source's arrival counters (one a kv head, zero between)
        fused_merge = fused
        masked_reduce = masked

        def rope_attention(self, qkv, pos, cos, sin, k_cache, v_cache, num_heads):
            kv_heads, max_context, dim = k_cache.shape
            group = num_heads // kv_heads
            group_p = max(16, triton.next_power_of_2(group))
            shape = self.config.attention_for(kv_heads, dim)
            min_chunk = int(settings.get('min_chunk', shape.min_chunk))
            splits = int(settings.get('splits', shape.splits))
            dev = qkv.device
            maxs = torch.empty(kv_heads * splits * group_p, device=dev,
                               dtype=torch.float32)
            sums = torch.empty_like(maxs)
            accs = torch.empty(kv_heads * splits * group_p, dim, device=dev,
                               dtype=torch.float32)
            stamping = getattr(module, 'STAMPING', None)
            stamps, base = ((stamping.stamps.data_ptr(), stamping.launch()['STAMP_BASE'])
                            if stamping else (None, 0))
            out = torch.empty(num_heads, dim, device=dev, dtype=torch.float32)
            ptr = [ctypes.c_void_p(t.data_ptr()) for t in
                   (qkv, k_cache, v_cache, pos, cos, sin, maxs, sums, accs)]
            common = (dim, 1, *ptr, max_context, ctypes.c_float(dim ** -0.5), group, group_p,
                      num_heads, kv_heads, splits, min_chunk, 1)
            tail = (ctypes.c_void_p(stamps), ctypes.c_longlong(base),
                    ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
            if fused:
                if self.counters is None:   # zeros once, outside any capture; kept at zero
                    self.counters = torch.zeros(64, device=dev, dtype=torch.int32)
                assert kv_heads <= len(self.counters)
                rc = lib.physinf_split_fused(*common, ctypes.c_void_p(out.data_ptr()),
                                             ctypes.c_void_p(self.counters.data_ptr()), *tail)
            else:
                rc = lib.physinf_split(*common, *tail)
            assert rc == 0, lib.physinf_split_error(rc)
            if masked:
                _masked_reduce[(num_heads,)](maxs, sums, accs, out, pos, group,
                                             KEY_SPLITS=(key_splits or [splits])[0],
                                             MIN_CHUNK=min_chunk, TILE=64, D=dim,
                                             GROUP_P=group_p, SPLITS=splits, num_warps=4,
                                             launch_pdl=True)
            elif not fused:
                module._attn_reduce_kernel[(num_heads,)](maxs, sums, accs, out, group, D=dim,
                                                         GROUP_P=group_p, SPLITS=splits,
                                                         num_warps=4, **module._pdl(dev))
            return out.view(-1)

    return CudaSplitOps(module.KernelConfig.for_device(torch.device('cuda')))


def split_programs(stamped, ops_a_layer):
    """
    Print layer 1's split programs, medians from each one's release.

    Queries rotated, first tile attended, loop done and end, for the split holding pos, the
    other splits with keys and the splits without (v30e's leave no stamps).
    """
    split = ops_a_layer + 1 + stamped.STAMPING.skipped
    rows = stamped.STAMPING.stamps.view(LAUNCHES, SLOT, WIDTH)[split].cpu()
    rows = rows[rows[:, 0] > 0]
    first = rows[:, 1].min()
    for name, chosen in (('holding pos', rows[:, 4] > 0),
                         ('other splits with keys', (rows[:, 3] > 0) & (rows[:, 4] == 0)),
                         ('splits without keys', rows[:, 3] == 0)):
        picked = rows[chosen]
        if not len(picked):
            continue
        spans = [(picked[:, k] - picked[:, 1]).double().median().item() / 1e3
                 if (picked[:, k] > 0).all() else float('nan') for k in (3, 5, 6, 2)]
        reached, released = ((picked[:, k] - first).double() / 1e3 for k in (0, 1))
        print(f'  {name} ({len(picked)}): rotated, first tile, loop done, end: '
              + ' '.join(f'{v:.2f}' for v in spans)
              + f'; wait reached {reached.median().item():.2f} (last {reached.max().item():.2f}),'
              f' released {released.median().item():.2f} (last {released.max().item():.2f})')


def main():
    dev = torch.device('cuda')
    stamped = stamped_module()
    sources = os.environ.get('SOURCES', 'cuda=' + os.path.join(HERE, 'split_cuda.cu'))
    plain = {'triton': kernels.KernelOps(triton_config(kernels, dev))}
    marked = {'triton': stamped.KernelOps(triton_config(stamped, dev))}
    for arm in sources.split():
        name, path = arm.split('=', 1)
        plain[name] = cuda_split_ops(kernels, build(path, False), path)
        marked[name] = cuda_split_ops(stamped, build(path, True), path)
    for spec in sys.argv[1:]:
        arch, contexts = spec.split(':')
        contexts = [int(c) for c in contexts.split(',')]
        check(arch, plain, dev)
        model = Model(arch, max(contexts), dev)
        for ctx in contexts:
            time_arms(model, plain, arch, ctx)
            for name, ops in marked.items():
                if getattr(ops, 'masked_reduce', False):
                    continue   # its reduce kernel is not stamped: no table
                # A fused source's layer has five ops, no reduce.
                names = [n for n in NAMES if n != 'attn reduce'
                         or not getattr(ops, 'fused_merge', False)]
                launches, win = stamped_windows(stamped, model, ops, ctx)
                print(f'{arch} ctx {ctx} {name}, stamped: step from first wait to last end '
                      f'{win[-1][3] - win[0][0]:.1f} us')
                print_table(op_rows(win, launches, names), names)
                split_programs(stamped, len(names))
        del model
        torch.cuda.empty_cache()


if __name__ == '__main__':
    main()
