"""
Session 24, run 7: whether a tile-major weight layout streams faster than row-major.

v28 put each gate/up program's rows in one span and gained 0.85 us a launch on the 8B. A GEMV
program still loads each [block_n, block_k] tile as block_n row pieces of block_k elements, a
row apart. Tile-major (W as [N / block_n, K / block_k, block_n, block_k], contiguous) makes every
tile one contiguous piece and a program's tiles one span. Arms, each a graphed chain of CHAIN
launches over CHAIN weight copies under PDL, 5 interleaved rounds:
  rows   the package's _matvec_kernel (plain store, kernels.yaml's launch shape) on row-major W
  tiles  the same arithmetic on the tile-major copy (same launch shape, tiles ahead of the wait)
Checks: tiles gives rows' output bit for bit.
Usage: probe_tiles.py   (the 8B's four layer GEMVs, gate/up's rows as one, and the head)
"""
import statistics
import sys

from physinf_ros.engine import kernels
from physinf_ros.engine.kernels import KernelConfig
import torch
import triton
import triton.language as tl

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from probe import graph_of, time_graph   # noqa: E402, I100  (run 1's chain and timing)

CHAIN, ROUNDS = 8, 5
SHAPES = [('qkv', 'rms_matvec', 6144, 4096), ('o_proj', 'matvec_add', 4096, 4096),
          ('gate/up rows', 'rms_matvec', 28672, 4096), ('down', 'matvec_add', 4096, 14336),
          ('head', 'rms_matvec', 128256, 4096)]


@triton.jit
def _tiled_matvec_kernel(W, X, Y, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         AHEAD: tl.constexpr, STREAM: tl.constexpr, PDL: tl.constexpr):
    tiles = K // BLOCK_K
    size = BLOCK_N * BLOCK_K
    base = W + tl.program_id(0).to(tl.int64) * tiles * size
    offsets = tl.arange(0, BLOCK_N)[:, None] * BLOCK_K + tl.arange(0, BLOCK_K)[None, :]
    w_next = tl.load(base + offsets, eviction_policy=STREAM)
    if AHEAD >= 2:
        w_next2 = tl.load(base + size + offsets, mask=1 < tiles, other=0.0,
                          eviction_policy=STREAM)
    kernels._grid_sync(PDL)
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    for t in range(0, tiles):
        w = w_next
        if AHEAD == 1:
            w_next = tl.load(base + (t + 1) * size + offsets, mask=t + 1 < tiles, other=0.0,
                             eviction_policy=STREAM)
        else:
            w_next = w_next2
            w_next2 = tl.load(base + (t + 2) * size + offsets, mask=t + 2 < tiles, other=0.0,
                              eviction_policy=STREAM)
        cols = tl.multiple_of(t * BLOCK_K, BLOCK_K) + tl.arange(0, BLOCK_K)
        x = tl.load(X + cols).to(W.dtype.element_ty).to(tl.float32)
        acc += w.to(tl.float32) * x[None, :]
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(Y + rows, tl.sum(acc, axis=1))


def tiled(w: torch.Tensor, block_n: int, block_k: int) -> torch.Tensor:
    n, k = w.shape
    return w.view(n // block_n, block_n, k // block_k, block_k).transpose(1, 2).contiguous()


def rows_matvec(w, x, config):
    y = torch.empty(w.shape[0], device=x.device, dtype=torch.float32)
    kernels._matvec(w, x, y, None, None, 0.0, 'matvec_add', config)
    return y


def tiles_matvec(w, x, shape):
    n = w.shape[0] * shape.block_n
    y = torch.empty(n, device=x.device, dtype=torch.float32)
    _tiled_matvec_kernel[(w.shape[0],)](
        w, x, y, w.shape[1] * shape.block_k, BLOCK_N=shape.block_n, BLOCK_K=shape.block_k,
        AHEAD=shape.tiles_ahead, STREAM='evict_first', num_warps=shape.num_warps, PDL=True,
        launch_pdl=True)
    return y


def main() -> None:
    torch.manual_seed(0)
    print(torch.cuda.get_device_name(), flush=True)
    base = KernelConfig.for_device(torch.device('cuda'))
    arms, alive, sizes = {}, [], {}
    for name, kind, n, k in SHAPES:
        shape = base.gemv(kind, n, k)
        config = base.with_gemv('matvec_add', n, k, shape)   # the plain-store path, that shape
        ws = [torch.randn(n, k, device='cuda', dtype=torch.bfloat16) * 0.02
              for _ in range(CHAIN)]
        wt = [tiled(w, shape.block_n, shape.block_k) for w in ws]
        x = torch.randn(k, device='cuda', dtype=torch.float32)
        alive.append((ws, wt, x))
        ref, out = rows_matvec(ws[0], x, config), tiles_matvec(wt[0], x, shape)
        torch.cuda.synchronize()
        print(f'{name} {shape}: tiles equals rows bit for bit: {torch.equal(ref, out)} '
              f'(max diff {(ref - out).abs().max().item():.3g})', flush=True)
        arms[f'{name} rows'] = graph_of(
            lambda ws=ws, x=x, config=config: [rows_matvec(w, x, config) for w in ws])
        arms[f'{name} tiles'] = graph_of(
            lambda wt=wt, x=x, shape=shape: [tiles_matvec(w, x, shape) for w in wt])
        sizes[name] = n * k * 2 / 1e9
    results = {arm: [] for arm in arms}
    for _ in range(ROUNDS):
        for arm, graph in arms.items():
            results[arm].append(time_graph(graph))
    for arm, times in results.items():
        us = statistics.median(times)
        gbytes = sizes[arm.rsplit(' ', 1)[0]]
        print(f'  {arm:20s} {us:8.2f} us a launch ({gbytes / us * 1e3:.3f} TB/s); '
              f'rounds {" ".join(f"{t:.2f}" for t in times)}', flush=True)


if __name__ == '__main__':
    main()
