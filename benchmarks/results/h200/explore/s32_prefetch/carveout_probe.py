"""
Session 32: the split of each SM's L1 and shared memory across the step's kernels.

An SM runs one carveout (shared memory against L1) at a time. A kernel that needs a large one (the
CUDA attention split: 110 KB a block at head size 128, ~55 KB at 64) may not be placed on an SM
where a kernel with a small one (every Triton GEMV and the reduce) still has programs, until they
leave, and the other way round; run 2 measured that forcing the largest carveout on one kernel
a layer (o_proj) costs 0.7-2.7 us a layer. The arms set every kernel of the step to one
preference, so that no SM has to change: the Triton kernels of a kernels.py copy (session 14's
kernels_module) get CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT on their functions, and
the CUDA split, from a copy of attention_split.cu, a launch attribute of the same value. Each
arm's logits against the package's, then the step (layers and greedy head, graphed) in
interleaved rounds (relaxed_probe's GreedyModel and check_and_time).
With MOST_L1=1 (run 5) the one arm is the Triton kernels at carveout 0, the most L1. With
NEIGHBOURS=1 (run 6) the arms set 100 on the split's neighbours alone: QKV (on a JIT function of
its own in the copy), the reduce, both, and both with the split. With REDUCE_SWEEP=1 (run 7) the
reduce's alone at 0, 25, 50 and 75. With SYNC=1 (run 10) the reduce at 0 alone, timed both as
the other runs time it (replays back to back) and with each replay waited for. With V38=1
(prepared as run 11, run as ../s33_keys/run1.sh) that arm beside v38's kernels.py
(v38_kernels.diff) with reduce_carveout 0 and -1.
Usage: carveout_probe.py ARCH:CTX[,CTX]... (PYTHONPATH the repository root)
"""
import ctypes
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
for probe in ('s14_timeline', 's28_flags', 's30_mlp'):
    sys.path.insert(0, os.path.join(HERE, '..', probe))
from physinf_ros.bench.attention import captured_graph, WARMUP_REPLAYS  # noqa: E402
from physinf_ros.engine import attention_cuda, kernels  # noqa: E402
from relaxed_probe import check_and_time, GreedyModel  # noqa: E402
from timeline import kernels_module  # noqa: E402
import torch  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402
from waits_probe import time_rounds  # noqa: E402

CARVEOUT_ATTRIBUTE = 9    # CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
LAUNCH = """  config.attrs = attrs;
  config.numAttrs = 1;
"""
LAUNCH_CARVED = """  cudaLaunchAttribute carved[2] = {attrs[0], {}};
  carved[1].id = cudaLaunchAttributePreferredSharedMemoryCarveout;
  carved[1].val.sharedMemCarveout = (unsigned int)CARVEOUT;
  config.attrs = carved;
  config.numAttrs = 2;
"""


def split_module(carveout):
    """Return the name of an attention_cuda.py copy whose split launches with `carveout`."""
    source = open(attention_cuda.SOURCE).read()
    assert source.count(LAUNCH) == 1
    folder = tempfile.mkdtemp()
    cu = os.path.join(folder, f'attention_split_carve{carveout}.cu')
    with open(cu, 'w') as f:
        f.write(f'#define CARVEOUT {carveout}\n' + source.replace(LAUNCH, LAUNCH_CARVED))
    py = open(attention_cuda.__file__).read()
    anchor = "SOURCE = Path(__file__).with_name('attention_split.cu')"
    assert py.count(anchor) == 1
    name = f'attention_cuda_carve{carveout}'
    module = kernels_module(py.replace(anchor, f'SOURCE = Path({cu!r})'), name)
    sys.modules['physinf_ros.engine.' + name] = module
    return name


QKV_LAUNCH = '    _matvec_kernel[(triton.cdiv(n, cfg.block_n), split_k)]('
# QKV's launch on a second JIT function of the same kernel, whose compiled kernels are its own
QKV_ONLY = ('    kernel = _qkv_kernel if norm_w is not None and argmax is None \\\n'
            '        else _matvec_kernel\n'
            '    kernel[(triton.cdiv(n, cfg.block_n), split_k)](')
QKV_KERNEL = '\n_qkv_kernel = triton.jit(_matvec_kernel.fn)\n'


def ops_module(carveout, split_too, tag=''):
    """
    Return a kernels.py copy whose Triton kernels take `carveout` (set_carveout, once built).

    split_too: the CUDA split launches with it too; tag: QKV on a JIT function of its own.
    """
    source = open(kernels.__file__).read()
    name = f'carve{carveout}_split{int(split_too)}{tag}'
    if tag:
        assert source.count(QKV_LAUNCH) == 1
        source = source.replace(QKV_LAUNCH, QKV_ONLY) + QKV_KERNEL
    if split_too:
        anchor = 'from . import attention_cuda\n'
        assert source.count(anchor) == 3   # the split's launch and two checks of its library
        source = source.replace(anchor, f'from . import {split_module(carveout)} '
                                        'as attention_cuda\n')
    return kernels_module(source, name)


def set_carveout(module, carveout, names=None):
    """Set the carveout of module's compiled Triton kernels (of `names`); return how many."""
    cuda = ctypes.CDLL('libcuda.so.1')
    count = 0
    for name, fn in vars(module).items():
        if not isinstance(fn, JITFunction) or (names is not None and name not in names):
            continue
        for cache in fn.device_caches.values():
            for compiled in cache[0].values():
                compiled._init_handles()
                code = cuda.cuFuncSetAttribute(ctypes.c_void_p(compiled.function),
                                               CARVEOUT_ATTRIBUTE, carveout)
                assert code == 0, f'cuFuncSetAttribute: CUresult {code}'
                count += 1
    return count


def report(modules):
    """Set each arm's carveout on its module's compiled Triton kernels, and say how many."""
    for name, (module, carveout, triton_too) in modules.items():
        if triton_too:
            names = None if triton_too is True else triton_too
            print(f'  {name}: {set_carveout(module, carveout, names)} Triton kernels set',
                  flush=True)


def synchronous_step_ms(model, ops, ctx, steps=30):
    """
    Return the median host time of one replay waited for before the next (the protocol's way).

    The step is captured as _time_cuda_graph captures it; its replays, unlike that function's,
    never queue behind each other.
    """
    graph = captured_graph(lambda: model.step(ops, ctx))
    times = []
    for _ in range(WARMUP_REPLAYS + steps):
        start = time.perf_counter()
        graph.replay()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times[WARMUP_REPLAYS:]) * 1e3


def applied(source, diff_path):
    """Return `source` with a one-file unified diff applied, each hunk found once, by its text."""
    hunks = open(diff_path).read().split('\n@@')[1:]   # the machine may have no `patch`
    for hunk in hunks:
        lines = hunk.split('\n')[1:]
        old = [line[1:] for line in lines if line[:1] in (' ', '-')]
        new = [line[1:] for line in lines if line[:1] in (' ', '+')]
        old_text, new_text = '\n'.join(old) + '\n', '\n'.join(new) + '\n'
        assert source.count(old_text) == 1, hunk.split('\n')[0]
        source = source.replace(old_text, new_text)
    return source


def v38_ops(carveout):
    """
    Return KernelOps of v38's kernels.py (v38_kernels.diff on the package's), reduce at carveout.

    v38 sets the carveout in the package (a constexpr, the attribute set before the first
    launch); run 7's arm set it on a kernels.py copy's compiled reduce after the first step.
    """
    source = applied(open(kernels.__file__).read(), os.path.join(HERE, 'v38_kernels.diff'))
    module = kernels_module(source, f'v38_kernels_{carveout}')
    config = module.KernelConfig.for_device(torch.device('cuda'))
    return module.KernelOps(config.with_flag('attention.reduce_carveout', str(carveout)))


def main():
    dev = torch.device('cuda')
    config = kernels.KernelConfig.for_device(dev)
    # name: (carveout, set on the Triton kernels (True: all; or these), set on the CUDA split)
    arms_of = {'all 100 (228 KB shared)': (100, True, True), 'all 50': (50, True, True),
               'Triton 100, split default': (100, True, False),
               'split 100 alone': (100, False, True)}
    if os.environ.get('MOST_L1') == '1':   # run 5: the Triton kernels at the most L1 alone
        arms_of = {'Triton 0 (most L1), split default': (0, True, False)}
    if os.environ.get('NEIGHBOURS') == '1':   # run 6: the split's two neighbours alone
        arms_of = {'QKV 100': (100, ('_qkv_kernel',), False),
                   'reduce 100': (100, ('_attn_reduce_kernel',), False),
                   'QKV and reduce 100': (100, ('_qkv_kernel', '_attn_reduce_kernel'), False),
                   'QKV, split and reduce 100': (100, ('_qkv_kernel', '_attn_reduce_kernel'),
                                                 True)}
    if os.environ.get('REDUCE_SWEEP') == '1':   # run 7: the reduce's carveout alone, swept
        arms_of = {f'reduce {value}': (value, ('_attn_reduce_kernel',), False)
                   for value in (0, 25, 50, 75)}
    synchronous = os.environ.get('SYNC') == '1'   # run 10: the reduce at 0, replays waited for
    v38 = os.environ.get('V38') == '1'   # v38's way of setting it, beside run 7's
    if synchronous or v38:
        arms_of = {'reduce 0': (0, ('_attn_reduce_kernel',), False)}
    for spec in sys.argv[1:]:
        arch, contexts = spec.split(':')
        contexts = [int(c) for c in contexts.split(',')]
        model = GreedyModel(arch, max(contexts) + 64, dev)
        arms = {'package': kernels.KernelOps(config)}
        modules = {}
        for n, (name, (carveout, triton_too, split_too)) in enumerate(arms_of.items()):
            tag = f'_qkv{n}' if isinstance(triton_too, tuple) else ''
            module = ops_module(carveout, split_too, tag)
            modules[name] = module, carveout, triton_too
            arms[name] = module.KernelOps(config)
        if v38:
            arms['v38, reduce_carveout 0'] = v38_ops(0)
            arms['v38, reduce_carveout -1'] = v38_ops(-1)
        for ctx in contexts:
            check_and_time(model, arms, arch, ctx, 26, lambda: report(modules))
            if synchronous:
                print('  the same, each replay waited for (synchronous):', flush=True)
                time_rounds(model, arms, arch, ctx, synchronous_step_ms, 26)
        del model, arms
        torch.cuda.empty_cache()


if __name__ == '__main__':
    main()
