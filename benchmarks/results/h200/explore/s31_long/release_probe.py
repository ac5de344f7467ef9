"""
Session 31: the bf16 GEMVs release the next kernel after their loop, not at their start.

Every kernel of the step calls `griddepcontrol.launch_dependents` right after its PDL wait, so
the next kernel's programs are placed on the SMs while this one's still run, wherever there is
room, and load their first weight tiles there. Placement has cost before: o_proj released early
by the split kernel's merge (v30g, session 27) made gate/up and the head, later in the chain,
slower by 4-5 us on the 8B, and a deeper attention ring (v36) that lets fewer attention blocks
share an SM took 1-1.7% off the steps at 2048 for reasons not measured. Here a GEMV kind releases
the next kernel after its loop instead (every weight load issued; the sums, the epilogue and
its stores still to come), so the next kernel's programs are placed when this one's are nearly
done. Arms: kernels.py loaded as modules of their own with the release moved in the residual
GEMVs (o_proj, down), in QKV, in gate/up, or in all of them; each checked against the package's
logits, then the step (layers and the greedy head, graphed), interleaved rounds
(../s28_flags/waits_probe.py's time_rounds).
Usage: release_probe.py ARCH:CTX[,CTX]... (PYTHONPATH the repository root)
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
for folder in ('s14_timeline', 's28_flags', 's30_mlp'):
    sys.path.insert(0, os.path.join(HERE, '..', folder))
from physinf_ros.engine import kernels  # noqa: E402
from relaxed_probe import GreedyModel, step_ms  # noqa: E402
from timeline import kernels_module  # noqa: E402
import torch  # noqa: E402
from waits_probe import time_rounds  # noqa: E402

SYNC = '    _grid_sync(PDL)\n'
LOOP_END = {'matvec': '    y = tl.sum(acc, axis=1)\n',
            'gate_up': '    inv_rms = _inv_rms(squares, K, eps)\n'}
# Which programs of _matvec_kernel release late, by its constexprs (the greedy head, HAS_ARGMAX,
# keeps its release: its dependent is the step's last kernel).
MATVEC_LATE = {'residual': 'ACCUMULATE', 'qkv': 'HAS_NORM and not HAS_ARGMAX',
               'all': 'not HAS_ARGMAX'}


def late(body: str, kernel: str, condition: str) -> str:
    """Return kernel body with its release after its loop where condition holds."""
    assert body.count(SYNC) == 1 and body.count(LOOP_END[kernel]) == 1, kernel
    body = body.replace(SYNC, f'    if PDL:\n        gdc_wait()\n        if not ({condition}):\n'
                              f'            gdc_launch_dependents()\n')
    return body.replace(LOOP_END[kernel], f'    if PDL and ({condition}):\n'
                                          f'        gdc_launch_dependents()\n' + LOOP_END[kernel])


def late_source(matvec: str, gate_up: bool) -> str:
    """Return kernels.py with the matvec programs of `matvec` (a condition) and gate/up late."""
    source = open(kernels.__file__).read()
    starts = {name: source.index(f'def _{name}_kernel(') for name in ('matvec', 'gate_up')}
    ends = {name: source.index('@triton.jit', start) for name, start in starts.items()}
    parts = {name: source[starts[name]:ends[name]] for name in starts}
    if matvec:
        source = source.replace(parts['matvec'], late(parts['matvec'], 'matvec', matvec))
    if gate_up:
        source = source.replace(parts['gate_up'], late(parts['gate_up'], 'gate_up', 'True'))
    return source


def main():
    dev = torch.device('cuda')
    config = kernels.KernelConfig.for_device(dev)
    variants = {'residual late': (MATVEC_LATE['residual'], False),
                'qkv late': (MATVEC_LATE['qkv'], False),
                'gate/up late': ('', True),
                'all late': (MATVEC_LATE['all'], True)}
    for spec in sys.argv[1:]:
        arch, contexts = spec.split(':')
        contexts = [int(c) for c in contexts.split(',')]
        model = GreedyModel(arch, max(contexts) + 64, dev)
        arms = {'package': kernels.KernelOps(config)}
        for name, (matvec, gate_up) in variants.items():
            module = kernels_module(late_source(matvec, gate_up),
                                    name.replace(' ', '_').replace('/', '_'))
            arms[name] = module.KernelOps(config)
        for ctx in contexts:
            outs = {}
            for name, ops in arms.items():
                model.token.fill_(77)
                model.step(ops, ctx)
                torch.cuda.synchronize()
                outs[name] = model.logits.clone(), int(model.token)
            base, token = outs['package']
            for name, (logits, tok) in outs.items():
                diff = ((logits - base).norm() / base.norm()).item()
                print(f'{arch} ctx {ctx} {name}: logits vs package {diff:.1e}, token {tok} '
                      f'(package {token})', flush=True)
            time_rounds(model, arms, arch, ctx, step_ms, 14)
        del model, arms
        torch.cuda.empty_cache()


if __name__ == '__main__':
    main()
