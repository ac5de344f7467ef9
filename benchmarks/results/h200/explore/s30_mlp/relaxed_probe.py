"""
Session 30: the GEMVs' atomics without acquire-release ordering (v35).

The package's matvec_add adds its sums into the residual with `tl.atomic_add` and the greedy
head folds each program's best logit into one slot with `tl.atomic_max`, both at Triton's default
order, acq_rel. Compiled for sm_90 that is MEMBAR.ALL.GPU before the atomic (the program waits
for its memory operations to complete) and CCTL.IVALL after it (the atomic's reply awaited, L1
invalidated): each program's exit waits for L2 round trips. Nothing in the step needs that order:
the next kernel reads these sums only after its PDL wait, which waits for the whole grid to end
and its writes to be flushed. With sem='relaxed' the add is a fire-and-forget REDG and the
program ends at once. The arms: kernels.py loaded as modules of their own (session 14's
kernels_module) with the adds, the argmax's max, or both relaxed; each checked against the
package's logits, then the step (layers and the greedy head, graphed), 5 interleaved rounds, the
arms' order reversed every other round (../s28_flags/waits_probe.py's time_rounds).
Usage: relaxed_probe.py ARCH:CTX[,CTX]... (PYTHONPATH the repository root)
"""
import os
import re
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 's14_timeline'))
sys.path.insert(0, os.path.join(HERE, '..', 's28_flags'))
from physinf_ros.bench.attention import _time_cuda_graph  # noqa: E402
from physinf_ros.engine import kernels  # noqa: E402
from physinf_ros.engine.llama import decode_layers  # noqa: E402
from timeline import kernels_module, Model  # noqa: E402
import torch  # noqa: E402
from waits_probe import time_rounds  # noqa: E402

ADDS = ('tl.atomic_add(Y + rows, y, mask=row_mask)', 'tl.atomic_add(Y + cols, y, mask=col_mask)')
MAX = 'tl.atomic_max(ARGMAX, (key.to(tl.int64) << 32) | (0xFFFFFFFF - row.to(tl.int64)))'


def relaxed_source(anchors):
    """Return kernels.py with the atomics in `anchors` relaxed."""
    source = open(kernels.__file__).read()
    for anchor in anchors:
        assert source.count(anchor) == 1, anchor
        source = source.replace(anchor, anchor[:-1] + ", sem='relaxed')")
    return source


class GreedyModel(Model):
    """timeline.Model whose step ends in the greedy head (the protocol's step)."""

    def step(self, ops, ctx):
        self.pos.fill_(ctx - 1)
        x = decode_layers(self.w, self.cache, self.token, self.pos, self.cos, self.sin, ops)
        ops.greedy_head(x, self.w.norm, self.w.lm_head, self.config.rms_norm_eps, self.logits,
                        self.token, self.pos, None)


def step_ms(model, ops, ctx):
    return statistics.median(_time_cuda_graph(lambda: model.step(ops, ctx), 30)) * 1e3


def run_arms(sources, specs):
    """
    For each ARCH:CTX[,CTX] of specs: the package and kernels.py copies (name -> source).

    Each arm's logits and token against the package's, then the step's rounds (time_rounds).
    """
    dev = torch.device('cuda')
    config = kernels.KernelConfig.for_device(dev)
    for spec in specs:
        arch, contexts = spec.split(':')
        contexts = [int(c) for c in contexts.split(',')]
        model = GreedyModel(arch, max(contexts) + 64, dev)
        arms = {'package': kernels.KernelOps(config)}
        for name, source in sources.items():
            module = kernels_module(source, re.sub(r'\W', '_', name))
            arms[name] = module.KernelOps(config)
        for ctx in contexts:
            check_and_time(model, arms, arch, ctx, 14)
        del model, arms
        torch.cuda.empty_cache()


def check_and_time(model, arms, arch, ctx, width, built=None):
    """
    Print each arm's logits and token against arms['package'], then time the arms' rounds.

    built(), when given, runs between the two, once every arm's kernels are compiled.
    """
    outs = {}
    for name, ops in arms.items():
        model.token.fill_(77)
        model.step(ops, ctx)
        torch.cuda.synchronize()
        outs[name] = model.logits.clone(), int(model.token)
    if built is not None:
        built()
    base, token = outs['package']
    for name, (logits, tok) in outs.items():
        diff = ((logits - base).norm() / base.norm()).item()
        print(f'{arch} ctx {ctx} {name}: logits vs package {diff:.1e}, token {tok} '
              f'(package {token})', flush=True)
    time_rounds(model, arms, arch, ctx, step_ms, width)


def main():
    modules = {'relaxed adds': ADDS, 'relaxed max': (MAX,), 'relaxed both': ADDS + (MAX,)}
    run_arms({name: relaxed_source(anchors) for name, anchors in modules.items()}, sys.argv[1:])


if __name__ == '__main__':
    main()
