"""
Session 24, runs 1-2: whether gate/up streams slower than one weight stream because it reads two.

The head streams 1.05 GB at ~4.40 TB/s in the step with gate/up's launch shape, while gate/up
streams at ~4.17 (docs/PERF.md, sessions 14 and 22). A gate/up program reads its rows of gate
and its rows of up, two spans 117 MB apart on the 8B. Here each arm is a graphed chain of
CHAIN launches (PDL, as in the step) over CHAIN distinct weight copies, so nothing is read from
L2, timed by events around the replay; rounds interleave the arms. Arms:
  two      the package's kernel (kernels.rms_gate_up_silu) on [gate; up]
  blocked  the same arithmetic on a blocked layout: program p's gate rows then its up rows
           are one contiguous span (block_n rows each)
  blocked xB  (run 2) B consecutive blocks a program, one stream of tiles across them
  single   kernels.rms_matvec over the same 2N rows (one stream; no SiLU, a reference)
Checks: blocked gives two's output bit for bit.
Usage: probe.py ARCH...   (llama-3.1-8b: N 14336, K 4096; llama-3.2-1b: N 8192, K 2048)
"""
import statistics
import sys

from physinf_ros.engine import kernels
from physinf_ros.engine.kernels import GemvConfig, KernelConfig
import torch
import triton
import triton.language as tl

CHAIN, REPLAYS, ROUNDS = 8, 20, 5
SHAPES = {'llama-3.1-8b': (14336, 4096), 'llama-3.2-1b': (8192, 2048),
          'llama-3.2-3b': (8192, 3072), 'qwen2.5-1.5b': (8960, 1536)}


@triton.jit
def _blocked_gate_up_kernel(W, X, Y, NORM, N, K, eps, BLOCK_N: tl.constexpr,
                            BLOCK_K: tl.constexpr, STREAM: tl.constexpr, PDL: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    gate_rows = W + (pid.to(tl.int64) * 2 * BLOCK_N + tl.arange(0, BLOCK_N))[:, None] * K
    up_rows = gate_rows + BLOCK_N * K
    row_mask = rows < N
    gate_next = kernels._tile(gate_rows, row_mask, 0, K, BLOCK_K, True, STREAM)
    up_next = kernels._tile(up_rows, row_mask, 0, K, BLOCK_K, True, STREAM)
    kernels._grid_sync(PDL)
    acc_gate = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    acc_up = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    squares = tl.zeros([BLOCK_K], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        w_gate, w_up = gate_next, up_next
        gate_next = kernels._tile(gate_rows, row_mask, k0 + BLOCK_K, K, BLOCK_K, True, STREAM)
        up_next = kernels._tile(up_rows, row_mask, k0 + BLOCK_K, K, BLOCK_K, True, STREAM)
        cols = tl.multiple_of(k0, BLOCK_K) + tl.arange(0, BLOCK_K)
        x, squares = kernels._normed(X, NORM, cols, cols < K, squares, True)
        acc_gate += w_gate.to(tl.float32) * x[None, :]
        acc_up += w_up.to(tl.float32) * x[None, :]
    inv_rms = kernels._inv_rms(squares, K, eps)
    gate = tl.sum(acc_gate, axis=1) * inv_rms
    up = tl.sum(acc_up, axis=1) * inv_rms
    tl.store(Y + rows, gate * tl.sigmoid(gate) * up, mask=row_mask)


@triton.jit
def _blocked_loop_kernel(W, X, Y, NORM, N, K, eps, BLOCKS: tl.constexpr, BLOCK_N: tl.constexpr,
                         BLOCK_K: tl.constexpr, STREAM: tl.constexpr, PDL: tl.constexpr):
    # BLOCKS consecutive blocks of the blocked layout a program, as one stream of tiles: the
    # next block's first tiles load while this block's last are summed.
    tiles = K // BLOCK_K
    total = BLOCKS * tiles
    first = tl.program_id(0).to(tl.int64) * BLOCKS
    offsets = tl.arange(0, BLOCK_N)[:, None] * K + tl.arange(0, BLOCK_K)[None, :]

    gate_next = tl.load(W + first * 2 * BLOCK_N * K + offsets, eviction_policy=STREAM)
    up_next = tl.load(W + (first * 2 + 1) * BLOCK_N * K + offsets, eviction_policy=STREAM)
    kernels._grid_sync(PDL)
    acc_gate = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    acc_up = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    squares = tl.zeros([BLOCK_K], dtype=tl.float32)
    for t in range(0, total):
        w_gate, w_up = gate_next, up_next
        t1 = t + 1
        block1 = first + t1 // tiles
        base1 = W + block1 * 2 * BLOCK_N * K + tl.multiple_of((t1 % tiles) * BLOCK_K, BLOCK_K)
        gate_next = tl.load(base1 + offsets, mask=t1 < total, other=0.0,
                            eviction_policy=STREAM)
        up_next = tl.load(base1 + BLOCK_N * K + offsets, mask=t1 < total, other=0.0,
                          eviction_policy=STREAM)
        cols = tl.multiple_of((t % tiles) * BLOCK_K, BLOCK_K) + tl.arange(0, BLOCK_K)
        x = tl.load(X + cols).to(tl.float32)
        if t < tiles:   # the norm's squares once, from the first block's pass
            squares += x * x
        x = x * tl.load(NORM + cols).to(tl.float32)
        acc_gate += w_gate.to(tl.float32) * x[None, :]
        acc_up += w_up.to(tl.float32) * x[None, :]
        if t % tiles == tiles - 1:
            inv_rms = kernels._inv_rms(squares, K, eps)
            gate = tl.sum(acc_gate, axis=1) * inv_rms
            up = tl.sum(acc_up, axis=1) * inv_rms
            rows = (first + t // tiles) * BLOCK_N + tl.arange(0, BLOCK_N)
            tl.store(Y + rows, gate * tl.sigmoid(gate) * up)
            acc_gate = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
            acc_up = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)


def blocked_loop_gate_up(x, norm_w, w, eps, cfg: GemvConfig, blocks: int):
    n = w.shape[0] // 2
    k = w.shape[1]
    y = torch.empty(n, device=x.device, dtype=torch.float32)
    _blocked_loop_kernel[(n // cfg.block_n // blocks,)](
        w, x, y, norm_w, n, k, eps, BLOCKS=blocks, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
        STREAM='evict_first', num_warps=cfg.num_warps, PDL=True, launch_pdl=True)
    return y


def blocked(w: torch.Tensor, block_n: int) -> torch.Tensor:
    """[gate; up] -> per block of block_n rows: its gate rows, then its up rows."""
    n2, k = w.shape
    n = n2 // 2
    return w.view(2, n // block_n, block_n, k).transpose(0, 1).contiguous().view(n2, k)


def blocked_gate_up(x, norm_w, w, eps, cfg: GemvConfig):
    n = w.shape[0] // 2
    k = w.shape[1]
    y = torch.empty(n, device=x.device, dtype=torch.float32)
    _blocked_gate_up_kernel[(n // cfg.block_n,)](
        w, x, y, norm_w, n, k, eps, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
        STREAM='evict_first', num_warps=cfg.num_warps, PDL=True, launch_pdl=True)
    return y


def graph_of(launch):
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):
            launch()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        launch()
    graph.replay()
    torch.cuda.synchronize()   # a fault shows here, at its arm
    return graph


def time_graph(graph) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(REPLAYS):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / CHAIN)
    return statistics.median(times)


def copy_rate() -> float:
    a = torch.empty(2 << 30, dtype=torch.uint8, device='cuda')
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(10):
        start.record()
        b.copy_(a)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return 2 * a.numel() / statistics.median(times) / 1e9   # TB/s, reads and writes


def main(archs) -> None:
    torch.manual_seed(0)
    print(torch.cuda.get_device_name(), f'copy rate {copy_rate():.3f} TB/s', flush=True)
    base = KernelConfig.for_device(torch.device('cuda'))
    for arch in archs:
        n, k = SHAPES[arch]
        ws = [torch.randn(2 * n, k, device='cuda', dtype=torch.bfloat16) * 0.02
              for _ in range(CHAIN)]
        x = torch.randn(k, device='cuda', dtype=torch.float32)
        norm_w = (1 + 0.1 * torch.randn(k, device='cuda')).to(torch.bfloat16)
        tuned = base.gemv('gate_up', n, k)
        shapes = sorted({tuned, GemvConfig(4, 256, 1, 4), GemvConfig(8, 256, 1, 4),
                         GemvConfig(8, 256, 1, 8), GemvConfig(16, 256, 1, 8),
                         GemvConfig(8, 512, 1, 8)}, key=lambda s: (s.block_n, s.block_k,
                                                                   s.num_warps))
        arms, alive = {}, []   # a graph holds no reference to the weights it reads
        for shape in shapes:
            if n % shape.block_n or k % shape.block_k:
                continue
            cfg = base.with_gemv('gate_up', n, k, shape)
            name = f'{shape.block_n}x{shape.block_k}w{shape.num_warps}'
            arms[f'two {name}'] = graph_of(
                lambda cfg=cfg: [kernels.rms_gate_up_silu(x, norm_w, w, 1e-5, cfg) for w in ws])
            wb = [blocked(w, shape.block_n) for w in ws]
            alive.append(wb)
            ref = kernels.rms_gate_up_silu(x, norm_w, ws[0], 1e-5, cfg)
            out = blocked_gate_up(x, norm_w, wb[0], 1e-5, shape)
            torch.cuda.synchronize()
            same = torch.equal(ref, out)
            print(f'{arch} {name}: blocked equals two bit for bit: {same} '
                  f'(max diff {(ref - out).abs().max().item():.3g})', flush=True)
            arms[f'blocked {name}'] = graph_of(
                lambda wb=wb, shape=shape: [blocked_gate_up(x, norm_w, w, 1e-5, shape)
                                            for w in wb])
            for loop in (2, 4):
                if (n // shape.block_n) % loop:
                    continue
                out = blocked_loop_gate_up(x, norm_w, wb[0], 1e-5, shape, loop)
                torch.cuda.synchronize()
                print(f'{arch} {name} {loop} blocks a program: equals two bit for bit: '
                      f'{torch.equal(ref, out)} (max diff {(ref - out).abs().max().item():.3g})',
                      flush=True)
                arms[f'blocked {name} x{loop}'] = graph_of(
                    lambda wb=wb, shape=shape, loop=loop: [
                        blocked_loop_gate_up(x, norm_w, w, 1e-5, shape, loop) for w in wb])
            if shape == tuned:
                single = base.with_gemv('rms_matvec', 2 * n, k, shape)
                arms[f'single {name}'] = graph_of(
                    lambda single=single: [kernels.rms_matvec(x, norm_w, w, None, 1e-5,
                                                              config=single) for w in ws])
        results = {arm: [] for arm in arms}
        for _ in range(ROUNDS):
            for arm, graph in arms.items():
                results[arm].append(time_graph(graph))
        gbytes = 2 * n * k * 2 / 1e9
        print(f'{arch}: N {n}, K {k}, {gbytes * 1000:.1f} MB a launch, kernels.yaml: {tuned}')
        for arm, times in results.items():
            us = statistics.median(times)
            print(f'  {arm:24s} {us:7.2f} us a launch ({gbytes / us * 1e3:.3f} TB/s); '
                  f'rounds {" ".join(f"{t:.2f}" for t in times)}', flush=True)


if __name__ == '__main__':
    main(sys.argv[1:])
