"""
Session 25: v30, session 12's v16c split kernel without clusters (split_cuda.cu), in the step.

Builds each CUDA split kernel with nvcc (SOURCES: space-separated NAME=PATH, default
cuda=split_cuda.cu; run 7 ran this script before SOURCES, its one arm `v30` being split_cuda.cu
at 4203af2), then: (1) its attention (CUDA split, the package's Triton reduce) and the package's
Triton kernels against ops_torch (float32 arithmetic on the bf16 cache) at several positions on
the 8B's and the 1B's attention shapes, with the cache rows each writes; (2) the step (layers and
head, graphed; session 14's timeline.Model and step_ms) with the package's kernels and with each
CUDA split, ROUNDS interleaved rounds. With MARKS=1 (not run yet) the CUDA splits are built with
-DMARKS and, after each cell's timing, their marks in the last layer of a replayed step are
printed: medians over the blocks with keys of each mark from the block's release (and the end of
the blocks without keys).
Usage: [SOURCES=...] [MARKS=1] split_cuda_probe.py ARCH:CTX[,CTX]... (PYTHONPATH the repository
root)
"""
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 's14_timeline'))
from physinf_ros.engine import kernels, ops_torch  # noqa: E402
from physinf_ros.engine.llama import KVCache, ModelConfig, rope_tables  # noqa: E402
from physinf_ros.engine.models import synthetic_config  # noqa: E402
from timeline import Model, step_ms  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402

ROUNDS = 5
MARKS = os.environ.get('MARKS') == '1'
MARK_NAMES = ('queries in shared memory', 'first tile attended', 'loop done', 'end')


def build(source: str) -> ctypes.CDLL:
    out = os.path.join(tempfile.mkdtemp(), 'split_cuda.so')
    subprocess.run(['nvcc', '-O3', '-std=c++17', '-arch=sm_90a', '-shared', '-Xcompiler',
                    '-fPIC', *(['-DMARKS'] if MARKS else []), source, '-o', out], check=True)
    lib = ctypes.CDLL(out)
    lib.physinf_split_error.restype = ctypes.c_char_p
    return lib


class CudaSplitOps(kernels.KernelOps):
    """The package's kernels, with a CUDA split kernel before the Triton reduce."""

    def __init__(self, config, lib):
        super().__init__(config)
        self.lib = lib

    def rope_attention(self, qkv, pos, cos, sin, k_cache, v_cache, num_heads):
        kv_heads, max_context, dim = k_cache.shape
        group = num_heads // kv_heads
        group_p = max(16, triton.next_power_of_2(group))
        shape = self.config.attention_for(kv_heads, dim)
        dev = qkv.device
        maxs = torch.empty(kv_heads * shape.splits * group_p, device=dev, dtype=torch.float32)
        sums = torch.empty_like(maxs)
        accs = torch.empty(kv_heads * shape.splits * group_p, dim, device=dev,
                           dtype=torch.float32)
        assert pos.dtype == torch.int32 and cos.dtype == torch.float32
        ptr = [ctypes.c_void_p(t.data_ptr()) for t in
               (qkv, k_cache, v_cache, pos, cos, sin, maxs, sums, accs)]
        rc = self.lib.physinf_split(
            dim, 1, *ptr, max_context, ctypes.c_float(dim ** -0.5), group, group_p, num_heads,
            kv_heads, shape.splits, shape.min_chunk, 1,
            ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
        assert rc == 0, self.lib.physinf_split_error(rc)
        out = torch.empty(num_heads, dim, device=dev, dtype=torch.float32)
        kernels._attn_reduce_kernel[(num_heads,)](maxs, sums, accs, out, group, D=dim,
                                                  GROUP_P=group_p, SPLITS=shape.splits,
                                                  num_warps=4, **kernels._pdl(dev))
        return out.view(-1)


def print_marks(name, ops, config, ctx):
    """Print a CUDA split's marks (the last layer of the step just replayed)."""
    kv_heads, dim = config.num_kv_heads, config.head_dim
    shape = ops.config.attention_for(kv_heads, dim)
    blocks = kv_heads * shape.splits
    host = (ctypes.c_ulonglong * (5 * blocks))()
    rc = ops.lib.physinf_split_marks(host, blocks)
    assert rc == 0, ops.lib.physinf_split_error(rc)
    marks = torch.tensor(list(host), dtype=torch.float64).view(blocks, 5)
    chunk = max(-(-ctx // shape.splits), shape.min_chunk)
    chunk = -(-chunk // 64) * 64
    keys = torch.tensor([(b % shape.splits) * chunk < ctx for b in range(blocks)])
    spans = (marks[:, 1:] - marks[:, :1]) / 1e3
    with_keys = spans[keys].median(dim=0).values.tolist()
    print(f'  {name} marks, us from release (median of {int(keys.sum())} blocks with keys): '
          + ', '.join(f'{n} {v:.2f}' for n, v in zip(MARK_NAMES, with_keys))
          + (f'; blocks without keys end {spans[~keys][:, 3].median().item():.2f}'
             if (~keys).any() else ''), flush=True)


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def check(arch, ops_by_name, dev):
    config = ModelConfig.from_hf(synthetic_config(arch))
    max_context = 4096
    cos, sin = rope_tables(config, max_context, dev)
    gen = torch.Generator(device=dev).manual_seed(2)
    base = KVCache.allocate(config, max_context, dev, torch.bfloat16)
    base.k.normal_(generator=gen)
    base.v.normal_(generator=gen)
    heads = config.num_heads
    for length in (1, 64, 65, 129, 2048, 2049, 4096):
        pos = torch.tensor([length - 1], dtype=torch.int32, device=dev)
        qkv = torch.randn((heads + 2 * config.num_kv_heads) * config.head_dim, device=dev,
                          generator=gen)
        k_ref, v_ref = base.k[0].clone(), base.v[0].clone()
        ref = ops_torch.rope_attention(qkv, pos, cos, sin, k_ref, v_ref, heads)
        line = []
        for name, ops in ops_by_name.items():
            k, v = base.k[0].clone(), base.v[0].clone()
            out = ops.rope_attention(qkv, pos, cos, sin, k, v, heads)
            torch.cuda.synchronize()
            line.append(f'{name} {rel(out, ref):.2e} (cache {rel(k, k_ref):.1e} '
                        f'{rel(v, v_ref):.1e})')
        print(f'{arch} length {length}: ' + ', '.join(line), flush=True)


def time_arms(model, arms, arch, ctx):
    """Print each arm's step (ROUNDS rounds, the arms' order reversed every other round)."""
    times = {name: [] for name in arms}
    for rnd in range(ROUNDS):
        for name in (list(arms) if rnd % 2 == 0 else list(arms)[::-1]):
            times[name].append(step_ms(model, arms[name], ctx))
    print(f'{arch} ctx {ctx}: ' + '; '.join(
        f'{name} {statistics.median(t):.3f} ms (' + ' '.join(f'{x:.3f}' for x in t) + ')'
        for name, t in times.items()), flush=True)


def main():
    dev = torch.device('cuda')
    config = kernels.KernelConfig.for_device(dev)
    sources = os.environ.get('SOURCES', 'cuda=' + os.path.join(HERE, 'split_cuda.cu'))
    arms = {'triton': kernels.KernelOps(config)}
    for arm in sources.split():
        name, path = arm.split('=')
        arms[name] = CudaSplitOps(config, build(path))
    for spec in sys.argv[1:]:
        arch, contexts = spec.split(':')
        contexts = [int(c) for c in contexts.split(',')]
        check(arch, arms, dev)
        model = Model(arch, max(contexts), dev)
        for ctx in contexts:
            time_arms(model, arms, arch, ctx)
            for name, ops in arms.items():
                if MARKS and isinstance(ops, CudaSplitOps):
                    step_ms(model, ops, ctx)
                    print_marks(name, ops, model.config, ctx)
        del model
        torch.cuda.empty_cache()


if __name__ == '__main__':
    main()
