"""
How fast tiles of 4-bit code words stream from HBM in GPTQ's layout and in a blocked one.

The 4-bit GEMVs read GPTQ's codes [K / 8, N] as a program's [BLOCK_R, BLOCK_N] tiles: each
tile row is BLOCK_N * 4 bytes (64-256), the next row N * 4 bytes further on. A blocked layout
[N / BLOCK_N, K / 8, BLOCK_N] puts a program's words in one contiguous run instead. This probe
times a kernel that only loads the tiles (no dequantisation) in both layouts, each GEMV shape of
the 8B's 4-bit step at its launch shape, captured in a CUDA graph as kernel_sweep.py times, so
that the read rate the layout allows is measured apart from the arithmetic (docs/PERF.md, v10c).
"""

import argparse
import json

from kernel_sweep import timed
from physinf_ros.measurement.targets import measure_copy_bandwidth
import torch
import triton
import triton.language as tl


@triton.jit
def _read_tiles(QW, OUT, word_rows, N_ALL, BLOCKED: tl.constexpr, BLOCK_R: tl.constexpr,
                BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    rows = tl.arange(0, BLOCK_R)
    cols = tl.arange(0, BLOCK_N)
    if BLOCKED:
        base = QW + pid.to(tl.int64) * word_rows * BLOCK_N
        ptrs = base + rows[:, None] * BLOCK_N + cols[None, :]
        step = BLOCK_R * BLOCK_N
    else:
        ptrs = QW + rows.to(tl.int64)[:, None] * N_ALL + (pid * BLOCK_N + cols)[None, :]
        step = BLOCK_R * N_ALL
    acc = tl.zeros([BLOCK_R, BLOCK_N], dtype=tl.int32)
    following = tl.load(ptrs, eviction_policy='evict_first')
    for _ in range(0, word_rows, BLOCK_R):   # one tile in flight ahead, as the GEMVs do
        tile = following
        ptrs += step
        following = tl.load(ptrs, mask=_ + BLOCK_R < word_rows, other=0,
                            eviction_policy='evict_first')
        acc ^= tile
    tl.store(OUT + pid * BLOCK_N + cols, tl.sum(acc, axis=0))


# (op, N, K, BLOCK_R word rows, BLOCK_N, warps): config/kernels.yaml's H200 4-bit shapes (gate and
# up as one matrix of 2 N columns; the split-K GEMVs read whole columns here).
SHAPES = [('qkv', 6144, 4096, 128, 16, 8), ('o_proj', 4096, 4096, 64, 64, 4),
          ('gate_up', 28672, 4096, 64, 64, 8), ('down', 4096, 14336, 64, 32, 4)]


def probe(device, copies: int):
    rows = []
    for op, n, k, block_r, block_n, warps in SHAPES:
        word_rows = k // 8
        codes = [torch.randint(-2 ** 31, 2 ** 31 - 1, (word_rows, n), dtype=torch.int32,
                               device=device) for _ in range(copies)]
        out = torch.empty(n, dtype=torch.int32, device=device)
        for blocked in (False, True):
            def run():
                for c in codes:
                    _read_tiles[(n // block_n,)](c, out, word_rows, n, BLOCKED=blocked,
                                                 BLOCK_R=block_r, BLOCK_N=block_n,
                                                 num_warps=warps)
            ms = timed(run) / copies
            rows.append({'op': op, 'n': n, 'k': k, 'block_r': block_r, 'block_n': block_n,
                         'num_warps': warps, 'layout': 'blocked' if blocked else 'gptq',
                         'ms': ms, 'gbps': word_rows * n * 4 / ms / 1e6})
            print(f"{op:8s} {rows[-1]['layout']:8s} {ms * 1e3:7.2f} us "
                  f"{rows[-1]['gbps']:7.0f} GB/s", flush=True)
        codes.clear()
        torch.cuda.empty_cache()
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--copies', type=int, default=8,
                        help='weights per shape, read in turn so that L2 holds none')
    parser.add_argument('--out', required=True, help='results JSON')
    args = parser.parse_args(argv)
    device = torch.device('cuda')
    result = {'gpu': torch.cuda.get_device_name(device),
              'copy_gbps': measure_copy_bandwidth(device), 'rows': probe(device, args.copies)}
    with open(args.out, 'w') as f:
        json.dump(result, f, indent=1)


if __name__ == '__main__':
    main()
