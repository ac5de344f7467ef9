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
sys.path.insert(0, os.path.join(HERE, '..', 's30_mlp'))   # relaxed_probe adds its own folders
from physinf_ros.engine import kernels  # noqa: E402
from relaxed_probe import run_arms  # noqa: E402

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
    variants = {'residual late': (MATVEC_LATE['residual'], False),
                'qkv late': (MATVEC_LATE['qkv'], False),
                'gate/up late': ('', True),
                'all late': (MATVEC_LATE['all'], True)}
    run_arms({name: late_source(matvec, gate_up) for name, (matvec, gate_up) in variants.items()},
             sys.argv[1:])


if __name__ == '__main__':
    main()
