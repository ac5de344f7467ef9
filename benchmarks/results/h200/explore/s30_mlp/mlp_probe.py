"""
Session 30: a layer's MLP in one kernel (v34): gate/up, SiLU and down, split along I.

The package runs a layer's MLP as two kernels: gate/up (RMSNorm, SiLU) writes h [I], and down
waits for all of it, then adds w_down @ h into the residual. v34 gives each program BLOCK_N of
the I intermediate rows: it takes their gate and up sums, h for them, and then their share of
down, w_down[:, rows] @ h[rows] [H], added into the residual with float32 atomic adds. No
program waits for another, the down weights' first tile is in flight before the kernel's PDL
wait, and a layer has five kernels, not six.
The residual is read (for the norm) and added into in the same kernel, so programs that start
late would read sums that early ones already added: o_proj therefore writes its result twice,
into the residual and into a copy (`_o_copy_kernel`, K not split, same sums as the package's),
and the MLP reads the copy.
DOWN_T: down's weights transposed once ([I, H], a program's share one contiguous span), or the
package's [H, I] (a program reads BLOCK_N columns of every row).
Arms: the package; o_proj's copy alone (the package's MLP after it); v34 at several launch
shapes. Each is checked against a float32 step (ops_torch, the same weights and cache) and the
package's logits, then timed as the step (layers and head, graphed; session 14's timeline.Model
and step_ms), 5 interleaved rounds, the arms' order reversed every other round
(../s28_flags/waits_probe.py's time_rounds).
Usage: mlp_probe.py ARCH:CTX[,CTX]... (PYTHONPATH the repository root)
"""
from dataclasses import fields, replace
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 's14_timeline'))
sys.path.insert(0, os.path.join(HERE, '..', 's28_flags'))
from physinf_ros.engine import kernels, ops_torch  # noqa: E402
from physinf_ros.engine.kernels import _grid_sync, _load, _pdl, _tile  # noqa: E402, F401
from physinf_ros.engine.llama import decode_layers, gate_up_block  # noqa: E402
from timeline import Model, step_ms  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from waits_probe import time_rounds  # noqa: E402


@triton.jit
def _o_copy_kernel(W, A, X, XC, N, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   EVEN: tl.constexpr, STREAM: tl.constexpr, PDL: tl.constexpr):
    # o_proj as the package's _matvec_kernel (K whole), its result stored into X and XC.
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < N
    w_rows = W + rows.to(tl.int64)[:, None] * K
    w_next = _tile(w_rows, row_mask, 0, K, BLOCK_K, EVEN, STREAM)
    _grid_sync(PDL)
    old = tl.load(X + rows, mask=row_mask, other=0.0)
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        w = w_next
        w_next = _tile(w_rows, row_mask, k0 + BLOCK_K, K, BLOCK_K, EVEN, STREAM)
        cols = tl.multiple_of(k0, BLOCK_K) + tl.arange(0, BLOCK_K)
        a = _load(A + cols, cols < K, EVEN).to(W.dtype.element_ty).to(tl.float32)
        acc += w.to(tl.float32) * a[None, :]
    y = old + tl.sum(acc, axis=1)
    tl.store(X + rows, y, mask=row_mask)
    tl.store(XC + rows, y, mask=row_mask)


@triton.jit
def _mlp_kernel(WGU, WD, XC, X, NORM, N_INTER, H, eps, ROW_BLOCK: tl.constexpr,
                BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_H: tl.constexpr,
                DOWN_T: tl.constexpr, EVEN: tl.constexpr, STREAM: tl.constexpr,
                PDL: tl.constexpr, ADD: tl.constexpr):
    # EVEN: whole tiles (the probe asserts N_INTER % BLOCK_N == H % BLOCK_K == H % BLOCK_H == 0).
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < N_INTER
    gate_index = (rows // ROW_BLOCK) * 2 * ROW_BLOCK + rows % ROW_BLOCK
    gate_rows = WGU + gate_index.to(tl.int64)[:, None] * H
    up_rows = gate_rows + ROW_BLOCK * H
    gate_next = _tile(gate_rows, row_mask, 0, H, BLOCK_K, EVEN, STREAM)
    up_next = _tile(up_rows, row_mask, 0, H, BLOCK_K, EVEN, STREAM)
    if DOWN_T:   # WD [N_INTER, H]: this program's rows, each a contiguous span of H
        down_rows = WD + rows.to(tl.int64)[:, None] * H
        down_next = _tile(down_rows, row_mask, 0, H, BLOCK_H, EVEN, STREAM)
    else:   # WD [H, N_INTER]: BLOCK_N columns of each of H rows, [BLOCK_H, BLOCK_N] a tile
        hid = tl.arange(0, BLOCK_H)
        down_cols = WD + hid.to(tl.int64)[:, None] * N_INTER + rows[None, :]
        # ADD 1: each program starts at its own tile of H, so programs add to different outputs
        start = (tl.program_id(0) * BLOCK_H) % H if ADD == 1 else 0
        down_next = tl.load(down_cols + start * N_INTER, eviction_policy=STREAM)
    _grid_sync(PDL)
    acc_gate = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    acc_up = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    squares = tl.zeros([BLOCK_K], dtype=tl.float32)
    for k0 in range(0, H, BLOCK_K):
        w_gate, w_up = gate_next, up_next
        gate_next = _tile(gate_rows, row_mask, k0 + BLOCK_K, H, BLOCK_K, EVEN, STREAM)
        up_next = _tile(up_rows, row_mask, k0 + BLOCK_K, H, BLOCK_K, EVEN, STREAM)
        cols = tl.multiple_of(k0, BLOCK_K) + tl.arange(0, BLOCK_K)
        x = tl.load(XC + cols)
        squares += x * x
        x = x * tl.load(NORM + cols).to(tl.float32)
        acc_gate += w_gate.to(tl.float32) * x[None, :]
        acc_up += w_up.to(tl.float32) * x[None, :]
    inv_rms = 1.0 / tl.sqrt(tl.sum(squares, axis=0) / H + eps)
    gate = tl.sum(acc_gate, axis=1) * inv_rms
    up = tl.sum(acc_up, axis=1) * inv_rms
    # down's input rounded as transformers rounds it (the package's matvec_add does the same)
    h = (gate * tl.sigmoid(gate) * up).to(WD.dtype.element_ty).to(tl.float32)
    for h0 in range(0, H, BLOCK_H):
        w = down_next
        if DOWN_T:
            down_next = _tile(down_rows, row_mask, h0 + BLOCK_H, H, BLOCK_H, EVEN, STREAM)
            part = tl.sum(w.to(tl.float32) * h[:, None], axis=0)
            out = h0 + tl.arange(0, BLOCK_H)
        else:
            down_next = tl.load(down_cols + ((start + h0 + BLOCK_H) % H) * N_INTER,
                                mask=h0 + BLOCK_H < H, other=0.0, eviction_policy=STREAM)
            part = tl.sum(w.to(tl.float32) * h[None, :], axis=1)
            out = (start + h0) % H + tl.arange(0, BLOCK_H)
        if ADD == 2:   # a bound: plain stores, no atomics (the results are wrong)
            tl.store(X + out, part)
        else:
            tl.atomic_add(X + out, part, sem='relaxed')


class FusedOps(kernels.KernelOps):
    """The package's ops; o_proj also writes a copy of the residual; the MLP is one kernel."""

    def __init__(self, config, model, mlp=None, transposed=None, add=0):
        super().__init__(config)
        c = model.config
        self.mlp = mlp   # (BLOCK_N, BLOCK_K, BLOCK_H, warps), or None: the package's MLP
        self.transposed = transposed   # w_down's address -> its transpose, or None
        self.down_t = transposed is not None
        self.xc = torch.empty(c.hidden_size, device='cuda', dtype=torch.float32)
        self.o_k = c.num_heads * c.head_dim
        self.add = add   # _mlp_kernel's ADD: 0 atomic adds, 1 rotated, 2 stores (a bound)
        self.pending = None

    def matvec_add(self, x, a, w):
        n, k = w.shape
        if k == self.o_k and self.pending is None:   # o_proj
            cfg = self.config.gemv('matvec_add', n, k)
            _o_copy_kernel[(triton.cdiv(n, cfg.block_n),)](
                w, a, x, self.xc, n, k, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
                EVEN=kernels._even(n, k, cfg), STREAM=self.config.stream(),
                num_warps=cfg.num_warps, **_pdl(x.device))
            return
        if self.pending is None:
            return super().matvec_add(x, a, w)
        norm_w, w_gate_up, eps = self.pending
        self.pending = None
        block_n, block_k, block_h, warps = self.mlp
        i, h = k, n
        assert i % block_n == 0 and h % block_k == 0 and h % block_h == 0
        wd = self.transposed[w.data_ptr()] if self.down_t else w
        _mlp_kernel[(i // block_n,)](
            w_gate_up, wd, self.xc, x, norm_w, i, h, eps, ROW_BLOCK=gate_up_block(i),
            BLOCK_N=block_n, BLOCK_K=block_k, BLOCK_H=block_h, DOWN_T=self.down_t, EVEN=True,
            STREAM=self.config.stream(), ADD=self.add, num_warps=warps, **_pdl(x.device))

    def rms_gate_up_silu(self, x, norm_w, w_gate_up, eps):
        if self.mlp is None:
            return super().rms_gate_up_silu(x, norm_w, w_gate_up, eps)
        self.pending = (norm_w, w_gate_up, eps)
        return None


class TorchOps:
    """ops_torch as an ops object (decode_layers calls ops.NAME)."""

    def __getattr__(self, name):
        return getattr(ops_torch, name)


def float32_logits(model, ctx):
    """Return the step's logits in float32 (ops_torch on float32 copies of weights and cache)."""
    w = model.w
    layers = [replace(layer, **{f.name: getattr(layer, f.name).float()
                                for f in fields(layer) if getattr(layer, f.name) is not None})
              for layer in w.layers]
    w32 = replace(w, embed=w.embed.float(), layers=layers, norm=w.norm.float(),
                  lm_head=w.lm_head.float())
    cache = replace(model.cache, k=model.cache.k.float(), v=model.cache.v.float())
    pos = torch.full((1,), ctx - 1, dtype=torch.int32, device='cuda')
    x = decode_layers(w32, cache, model.token, pos, model.cos, model.sin, TorchOps())
    logits = ops_torch.rms_matvec(x, w32.norm, w32.lm_head, None, model.config.rms_norm_eps)
    del w32, layers, cache
    torch.cuda.empty_cache()
    return logits


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


def main():
    dev = torch.device('cuda')
    config = kernels.KernelConfig.for_device(dev)
    # SHAPES: BLOCK_N,BLOCK_K,BLOCK_H,WARPS...; MODES: arms per shape (T: down transposed;
    # rotated: each program's first output tile its own; stores: no atomics, a bound)
    shapes = os.environ.get('SHAPES', '32,128,128,8 64,64,128,8 16,128,128,4 32,64,128,4 '
                                      '32,128,256,8')
    shapes = [tuple(int(v) for v in s.split(',')) for s in shapes.split()]
    modes = os.environ.get('MODES', 'atomic T').split()
    for spec in sys.argv[1:]:
        arch, contexts = spec.split(':')
        contexts = [int(c) for c in contexts.split(',')]
        model = Model(arch, max(contexts) + 64, dev)
        transposed = ({layer.w_down.data_ptr(): layer.w_down.t().contiguous()
                       for layer in model.w.layers} if 'T' in modes else None)
        arms = {'package': kernels.KernelOps(config),
                'o_proj copy only': FusedOps(config, model)}
        for shape in shapes:
            if model.config.intermediate_size % shape[0] == 0:
                name = 'v34 ' + ','.join(map(str, shape))
                if 'atomic' in modes:
                    arms[name] = FusedOps(config, model, shape)
                if 'T' in modes:
                    arms[name + ' T'] = FusedOps(config, model, shape, transposed)
                if 'rotated' in modes:
                    arms[name + ' rotated'] = FusedOps(config, model, shape, add=1)
                if 'stores' in modes:
                    arms[name + ' stores'] = FusedOps(config, model, shape, add=2)
        for ctx in contexts:
            reference = float32_logits(model, ctx)
            model.step(arms['package'], ctx)
            torch.cuda.synchronize()
            base_logits = model.logits.clone()
            for name, ops in arms.items():
                model.step(ops, ctx)
                torch.cuda.synchronize()
                print(f'{arch} ctx {ctx} {name}: vs float32 {rel(model.logits, reference):.2e}, '
                      f'vs package {rel(model.logits, base_logits):.2e}, argmax '
                      f'{int(model.logits.argmax())} (float32 {int(reference.argmax())})',
                      flush=True)
            time_rounds(model, arms, arch, ctx, step_ms, 22)
        del model, arms
        torch.cuda.empty_cache()


if __name__ == '__main__':
    main()
