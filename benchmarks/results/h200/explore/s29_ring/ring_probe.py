"""
Session 29: the dense GEMVs' weight tiles kept in flight across the loop's turns (v33).

Every bf16 GEMV of the package loads its next tile (`w_next`) at the top of a turn and sums the
one loaded a turn before (`w = w_next`). Compiled for sm_90, that rotation is a register copy at
the turn's end, and ptxas waits there for the load just issued: a program never has more than
one turn's tiles in flight, whatever `tiles_ahead` says (static_waits.py, static_waits.log).
v33 keeps AHEAD + 1 tiles in registers of their own, unrolled, each reloaded right after its
sum, so no copy and no wait ends a turn: all of them stay in flight. Same sums in the same order.
The arms: kernels.py loaded as a module of its own with a RING switch per GEMV (kind, n, k),
v33 on the GEMVs named; each checked against the package's logits, then the step (layers and
head, graphed; session 14's timeline.Model and step_ms), 5 interleaved rounds, the arms'
order reversed every other round.
Usage: ring_probe.py ARCH:CTX[,CTX]... (PYTHONPATH the repository root)
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 's14_timeline'))
sys.path.insert(0, os.path.join(HERE, '..', 's28_flags'))
from physinf_ros.engine import kernels  # noqa: E402
from timeline import kernels_module, Model, step_ms  # noqa: E402
import torch  # noqa: E402
from waits_probe import (add_switch, gemvs, kernel_head, switched_ops,  # noqa: E402
                         time_rounds)

RING = """
@triton.jit
def _ring_x(X, NORM, k0, k_end, squares, HAS_NORM: tl.constexpr, WT: tl.constexpr,
            BLOCK_K: tl.constexpr, EVEN: tl.constexpr):
    # One tile of the input, zeros past k_end (a scalar test for whole tiles keeps the vectors).
    cols = tl.multiple_of(k0, BLOCK_K) + tl.arange(0, BLOCK_K)
    if EVEN:
        mask = k0 < k_end
    else:
        mask = cols < k_end
    x = tl.load(X + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_NORM:
        squares += x * x
        return x * tl.load(NORM + cols, mask=mask, other=0.0).to(tl.float32), squares
    return x.to(WT).to(tl.float32), squares


@triton.jit
def _ring_sums(W, w_rows, row_mask, X, NORM, k_start, k_end, HAS_NORM: tl.constexpr,
               BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN: tl.constexpr,
               STREAM: tl.constexpr, AHEAD: tl.constexpr, PDL: tl.constexpr):
    # AHEAD + 1 tiles, each in registers of its own and reloaded right after its sum.
    WT = W.dtype.element_ty
    STEP: tl.constexpr = (AHEAD + 1) * BLOCK_K
    w_a = _tile(w_rows, row_mask, k_start, k_end, BLOCK_K, EVEN, STREAM)
    w_b = _tile(w_rows, row_mask, k_start + BLOCK_K, k_end, BLOCK_K, EVEN, STREAM)
    if AHEAD >= 2:
        w_c = _tile(w_rows, row_mask, k_start + 2 * BLOCK_K, k_end, BLOCK_K, EVEN, STREAM)
    if AHEAD >= 3:
        w_d = _tile(w_rows, row_mask, k_start + 3 * BLOCK_K, k_end, BLOCK_K, EVEN, STREAM)
    _grid_sync(PDL)
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    squares = tl.zeros([BLOCK_K], dtype=tl.float32)
    for k0 in range(k_start, k_end, STEP):
        x, squares = _ring_x(X, NORM, k0, k_end, squares, HAS_NORM, WT, BLOCK_K, EVEN)
        acc += w_a.to(tl.float32) * x[None, :]
        w_a = _tile(w_rows, row_mask, k0 + STEP, k_end, BLOCK_K, EVEN, STREAM)
        x, squares = _ring_x(X, NORM, k0 + BLOCK_K, k_end, squares, HAS_NORM, WT, BLOCK_K,
                             EVEN)
        acc += w_b.to(tl.float32) * x[None, :]
        w_b = _tile(w_rows, row_mask, k0 + STEP + BLOCK_K, k_end, BLOCK_K, EVEN, STREAM)
        if AHEAD >= 2:
            x, squares = _ring_x(X, NORM, k0 + 2 * BLOCK_K, k_end, squares, HAS_NORM, WT,
                                 BLOCK_K, EVEN)
            acc += w_c.to(tl.float32) * x[None, :]
            w_c = _tile(w_rows, row_mask, k0 + STEP + 2 * BLOCK_K, k_end, BLOCK_K, EVEN, STREAM)
        if AHEAD >= 3:
            x, squares = _ring_x(X, NORM, k0 + 3 * BLOCK_K, k_end, squares, HAS_NORM, WT,
                                 BLOCK_K, EVEN)
            acc += w_d.to(tl.float32) * x[None, :]
            w_d = _tile(w_rows, row_mask, k0 + STEP + 3 * BLOCK_K, k_end, BLOCK_K, EVEN, STREAM)
    return acc, squares


@triton.jit
def _ring_gate_up_sums(gate_rows, up_rows, row_mask, X, NORM, K, BLOCK_N: tl.constexpr,
                       BLOCK_K: tl.constexpr, EVEN: tl.constexpr, STREAM: tl.constexpr,
                       PDL: tl.constexpr):
    g_a = _tile(gate_rows, row_mask, 0, K, BLOCK_K, EVEN, STREAM)
    u_a = _tile(up_rows, row_mask, 0, K, BLOCK_K, EVEN, STREAM)
    g_b = _tile(gate_rows, row_mask, BLOCK_K, K, BLOCK_K, EVEN, STREAM)
    u_b = _tile(up_rows, row_mask, BLOCK_K, K, BLOCK_K, EVEN, STREAM)
    _grid_sync(PDL)
    acc_gate = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    acc_up = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    squares = tl.zeros([BLOCK_K], dtype=tl.float32)
    for k0 in range(0, K, 2 * BLOCK_K):
        x, squares = _ring_x(X, NORM, k0, K, squares, True, tl.float32, BLOCK_K, EVEN)
        acc_gate += g_a.to(tl.float32) * x[None, :]
        acc_up += u_a.to(tl.float32) * x[None, :]
        g_a = _tile(gate_rows, row_mask, k0 + 2 * BLOCK_K, K, BLOCK_K, EVEN, STREAM)
        u_a = _tile(up_rows, row_mask, k0 + 2 * BLOCK_K, K, BLOCK_K, EVEN, STREAM)
        x, squares = _ring_x(X, NORM, k0 + BLOCK_K, K, squares, True, tl.float32, BLOCK_K, EVEN)
        acc_gate += g_b.to(tl.float32) * x[None, :]
        acc_up += u_b.to(tl.float32) * x[None, :]
        g_b = _tile(gate_rows, row_mask, k0 + 3 * BLOCK_K, K, BLOCK_K, EVEN, STREAM)
        u_b = _tile(up_rows, row_mask, k0 + 3 * BLOCK_K, K, BLOCK_K, EVEN, STREAM)
    return acc_gate, acc_up, squares


"""


def _indent(text):
    return ''.join('    ' + line if line.strip() else line for line in text.splitlines(True))


def ring_source() -> str:
    """Return kernels.py with a RING constexpr on the dense GEMV and gate/up kernels."""
    source = open(kernels.__file__).read()
    cuts = {'_matvec_kernel': ('    # Weights never depend on the previous kernel',
                               '        acc += w.to(tl.float32) * x[None, :]\n',
                               '        acc, squares = _ring_sums(\n'
                               '            W, w_rows, row_mask, X, NORM, k_start, k_end, '
                               'HAS_NORM, BLOCK_N,\n'
                               '            BLOCK_K, EVEN, STREAM, AHEAD, PDL)\n'),
            '_gate_up_kernel': ('    gate_next = _tile(gate_rows',
                                '        acc_up += w_up.to(tl.float32) * x[None, :]\n',
                                '        acc_gate, acc_up, squares = _ring_gate_up_sums(\n'
                                '            gate_rows, up_rows, row_mask, X, NORM, K, '
                                'BLOCK_N, BLOCK_K, EVEN, STREAM, PDL)\n')}
    for name, (first, last, call) in cuts.items():
        start = source.index(first, source.index(kernel_head(source, name)))
        end = source.index(last, start) + len(last)
        source = (source[:start] + '    if RING:\n' + call + '    else:\n'
                  + _indent(source[start:end]) + source[end:])
    anchor = '@triton.jit\ndef _matvec_kernel('
    assert source.count(anchor) == 1
    source = source.replace(anchor, RING.lstrip('\n') + anchor)
    return add_switch(source, 'RING', '(kind, n, k) of the GEMVs on v33')


def make_ops(module, config, ring):
    """Return the package's ops, the GEMVs in `ring` on v33."""
    return switched_ops(module, config, 'RING', ring)


def main():
    dev = torch.device('cuda')
    config = kernels.KernelConfig.for_device(dev)
    module = kernels_module(ring_source(), 'ring_kernels')
    for spec in sys.argv[1:]:
        arch, contexts = spec.split(':')
        contexts = [int(c) for c in contexts.split(',')]
        model = Model(arch, max(contexts) + 64, dev)
        c = model.config
        shapes = gemvs(c)
        head = ('rms_matvec', c.vocab_size, c.hidden_size)
        every = set(shapes.values()) | {head}
        arms = {'package': kernels.KernelOps(config),
                'same module, no ring': make_ops(module, config, set()),
                'v33 all': make_ops(module, config, every),
                'v33 but gate/up': make_ops(module, config, every - {shapes['gate_up']}),
                'v33 but QKV': make_ops(module, config, every - {shapes['qkv']})}
        arms.update({f'v33 {name} only': make_ops(module, config, {shape})
                     for name, shape in list(shapes.items()) + [('head', head)]})
        for ctx in contexts:
            model.step(arms['package'], ctx)
            torch.cuda.synchronize()
            base = model.logits.clone()
            for name, ops in arms.items():
                model.step(ops, ctx)
                torch.cuda.synchronize()
                diff = ((model.logits - base).norm() / base.norm()).item()
                same = torch.equal(model.logits, base)
                print(f'{arch} ctx {ctx} {name}: logits vs package {diff:.1e}'
                      f'{" (bit for bit)" if same else ""}', flush=True)
            time_rounds(model, arms, arch, ctx, step_ms, 28)
        del model, arms
        torch.cuda.empty_cache()


if __name__ == '__main__':
    main()
