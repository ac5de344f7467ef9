"""
Where a 4-bit GEMV's time goes: its tiles loaded alone, then with the arithmetic added in steps.

Each GEMV of the 8B's 4-bit step runs at its H200 launch shape (grid, tile, warps, K splits,
gate and up as two tiles per program), captured in a CUDA graph as kernel_sweep.py times it, in
these variants of one probe kernel, then as the engine's own kernel:

- `load`: only the code tiles, one in flight ahead as the GEMVs load them, in GPTQ's layout
  [K / 8, N] (a tile row is BLOCK_N * 4 bytes, the next one N * 4 bytes on) and `load_blocked`,
  a layout [N / BLOCK_N, K / 8, BLOCK_N] where a program's words are one contiguous run;
- `load_2_ahead`: the tiles in GPTQ's layout with two in flight ahead, not one;
- `load_pdl`: `load` launched as the engine launches its kernels, with programmatic dependent
  launch (the first tile loaded before the wait), so that each launch overlaps the previous
  kernel's drain;
- `dot`: + the half2 dot of every word (ops_triton._HALF2_DOT) with fixed inputs;
- `dot_scales`: + the group scales, loaded per tile and applied per word as the engine does;
- `engine`: the engine's kernel (inputs loaded, normed and rounded per tile, SiLU, residual).

So the time of each part of the arithmetic is measured apart from the rest. Then one layer's four
code matrices are loaded, with one tile shape for all, by four kernels in a row (`layer_separate`)
and by one kernel whose programs take the four matrices in turn (`layer_fused`): what fewer,
longer-lived kernels would save on the loads alone (docs/PERF.md, "Where the 4-bit GEMV time
goes", commit d8ca766).
"""

import argparse
import json

from kernel_sweep import gemv_cases, GROUP_SIZE, random_weight, timed
from physinf_ros.engine.kernels.config import KernelConfig
from physinf_ros.engine.kernels.ops_triton import _grid_sync, _HALF2_DOT, _pdl, KernelOps
from physinf_ros.engine.model.config import ModelConfig
from physinf_ros.engine.weights.resolve import resolve
from physinf_ros.measurement.targets import measure_copy_bandwidth
import torch
import triton
import triton.language as tl

VARIANTS = ('load', 'load_blocked', 'load_2_ahead', 'load_pdl', 'dot', 'dot_scales')
WORK = {'load': 0, 'load_blocked': 0, 'load_2_ahead': 0, 'load_pdl': 0, 'dot': 1,
        'dot_scales': 2}
_GROUP = tl.constexpr(GROUP_SIZE)


@triton.jit
def _probe_tile(tile, rows, cols, S, N_ALL, x0, x1, x2, x3, WORK: tl.constexpr):
    # One tile's contribution under each variant (WORK: 0 load, 1 dot, 2 dot with scales).
    if WORK == 0:
        return tile.to(tl.float32, bitcast=True)
    words = tl.full(rows.shape, 0, tl.int32)[:, None]
    part = tl.inline_asm_elementwise(
        _HALF2_DOT, '=r,r,r,r,r,r', [tile, words + x0, words + x1, words + x2, words + x3],
        dtype=tl.int32, is_pure=True, pack=1).to(tl.float32, bitcast=True)
    if WORK == 2:
        at = (rows // (_GROUP // 8)).to(tl.int64)[:, None] * N_ALL + cols[None, :]
        part = part * tl.load(S + at).to(tl.float32)
    return part


@triton.jit
def _probe_kernel(QW, S, OUT, word_rows, N, N_ALL, x0, x1, x2, x3, BLOCKED: tl.constexpr,
                  WORK: tl.constexpr, GATE_UP: tl.constexpr, SPLIT_K: tl.constexpr,
                  BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr, AHEAD: tl.constexpr,
                  PDL: tl.constexpr):
    pid = tl.program_id(0)
    r_len = tl.cdiv(tl.cdiv(word_rows, SPLIT_K), BLOCK_R) * BLOCK_R
    r_start = tl.program_id(1) * r_len
    r_end = tl.minimum(r_start + r_len, word_rows)
    rows = r_start + tl.arange(0, BLOCK_R)
    cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    if BLOCKED:
        ptrs = (QW + pid.to(tl.int64) * word_rows * BLOCK_N + rows[:, None] * BLOCK_N
                + tl.arange(0, BLOCK_N)[None, :])
        step = BLOCK_R * BLOCK_N
        up = N // BLOCK_N * word_rows * BLOCK_N   # the up columns' blocks follow gate's
    else:
        ptrs = QW + rows.to(tl.int64)[:, None] * N_ALL + cols[None, :]
        step = BLOCK_R * N_ALL
        up = N
    acc = tl.zeros([BLOCK_R, BLOCK_N], dtype=tl.float32)
    inside = (rows < r_end)[:, None]
    w_next = tl.load(ptrs, mask=inside, other=0, eviction_policy='evict_first')
    u_next = w_next
    if GATE_UP:
        u_next = tl.load(ptrs + up, mask=inside, other=0, eviction_policy='evict_first')
    w_after, u_after = w_next, u_next   # the tile after next, when two are in flight
    if AHEAD == 2:
        ptrs += step
        inside = (rows + BLOCK_R < r_end)[:, None]
        w_after = tl.load(ptrs, mask=inside, other=0, eviction_policy='evict_first')
        if GATE_UP:
            u_after = tl.load(ptrs + up, mask=inside, other=0, eviction_policy='evict_first')
    _grid_sync(PDL)
    for r0 in range(r_start, r_end, BLOCK_R):
        w, u = w_next, u_next
        if AHEAD == 2:
            w_next, u_next = w_after, u_after
        ptrs += step
        inside = (r0 + AHEAD * BLOCK_R + tl.arange(0, BLOCK_R) < r_end)[:, None]
        loaded = tl.load(ptrs, mask=inside, other=0, eviction_policy='evict_first')
        if AHEAD == 2:
            w_after = loaded
        else:
            w_next = loaded
        acc += _probe_tile(w, r0 + tl.arange(0, BLOCK_R), cols, S, N_ALL, x0, x1, x2, x3, WORK)
        if GATE_UP:
            loaded = tl.load(ptrs + up, mask=inside, other=0, eviction_policy='evict_first')
            if AHEAD == 2:
                u_after = loaded
            else:
                u_next = loaded
            acc += _probe_tile(u, r0 + tl.arange(0, BLOCK_R), cols + N, S, N_ALL, x0, x1, x2,
                               x3, WORK)
    tl.atomic_add(OUT + cols, tl.sum(acc, axis=0))


@triton.jit
def _load_columns(QW, OUT, col_block, word_rows, N_ALL, BLOCK_R: tl.constexpr,
                  BLOCK_N: tl.constexpr, PDL: tl.constexpr):
    # Load (and only load) the code words of BLOCK_N whole columns, one tile in flight ahead.
    cols = col_block * BLOCK_N + tl.arange(0, BLOCK_N)
    ptrs = QW + tl.arange(0, BLOCK_R).to(tl.int64)[:, None] * N_ALL + cols[None, :]
    acc = tl.zeros([BLOCK_R, BLOCK_N], dtype=tl.int32)
    following = tl.load(ptrs, eviction_policy='evict_first')
    _grid_sync(PDL)
    for r0 in range(0, word_rows, BLOCK_R):
        tile = following
        ptrs += BLOCK_R * N_ALL
        following = tl.load(ptrs, mask=r0 + BLOCK_R < word_rows, other=0,
                            eviction_policy='evict_first')
        acc ^= tile
    tl.atomic_xor(OUT + cols, tl.xor_sum(acc, axis=0))


@triton.jit
def _columns_kernel(QW, OUT, word_rows, N_ALL, BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr,
                    PDL: tl.constexpr):
    _load_columns(QW, OUT, tl.program_id(0), word_rows, N_ALL, BLOCK_R, BLOCK_N, PDL)


@triton.jit
def _layer_kernel(W0, W1, W2, W3, OUT, R0, R1, R2, R3, N0, N1, N2, N3, BLOCK_R: tl.constexpr,
                  BLOCK_N: tl.constexpr, PDL: tl.constexpr):
    # The programs of four column loads in one grid, matrix after matrix.
    pid = tl.program_id(0)
    end0 = N0 // BLOCK_N
    end1 = end0 + N1 // BLOCK_N
    end2 = end1 + N2 // BLOCK_N
    if pid < end0:
        _load_columns(W0, OUT, pid, R0, N0, BLOCK_R, BLOCK_N, PDL)
    elif pid < end1:
        _load_columns(W1, OUT, pid - end0, R1, N1, BLOCK_R, BLOCK_N, PDL)
    elif pid < end2:
        _load_columns(W2, OUT, pid - end1, R2, N2, BLOCK_R, BLOCK_N, PDL)
    else:
        _load_columns(W3, OUT, pid - end2, R3, N3, BLOCK_R, BLOCK_N, PDL)


def step_shapes(model: str = 'synthetic:llama-3.1-8b'):
    """(op, engine kind, N outputs, K inputs) of each 4-bit GEMV of a layer, in step order."""
    cases = gemv_cases(ModelConfig.from_hf(resolve(model).hf_config))
    q4 = [(kind.removesuffix('_q4'), n, k) for kind, n, k, _ in cases if kind.endswith('_q4')]
    return [(op, *case) for op, case in zip(('qkv', 'o_proj', 'gate_up', 'down'), q4)]


def probe_layer(device, copies: int, block_r=64, block_n=32, num_warps=4):
    """One layer's codes loaded by four kernels and by one, the same tile shape for both."""
    # Longest programs first (down's columns are 14336 inputs deep), so they do not trail.
    qkv, o_proj, gate_up, down = step_shapes()
    order = [down, gate_up, qkv, o_proj]
    layers = [[random_weight(kind + '_q4', 2 * n if kind == 'gate_up' else n, k, device,
                             torch.bfloat16) for _, kind, n, k in order] for _ in range(copies)]
    out = torch.zeros(max(w.codes.shape[1] for w in layers[0]), dtype=torch.int32,
                      device=device)
    nbytes = sum(w.codes.numel() * 4 for w in layers[0])
    launch = dict(BLOCK_R=block_r, BLOCK_N=block_n, num_warps=num_warps, **_pdl(device))

    def separate():
        for layer in layers:
            for w in layer:
                rows, n_all = w.codes.shape
                _columns_kernel[(n_all // block_n,)](w.codes, out, rows, n_all, **launch)

    def fused():
        for layer in layers:
            codes = [w.codes for w in layer]
            grid = sum(c.shape[1] // block_n for c in codes)
            _layer_kernel[(grid,)](*codes, out, *(c.shape[0] for c in codes),
                                   *(c.shape[1] for c in codes), **launch)

    rows = []
    for name, run in (('layer_separate', separate), ('layer_fused', fused)):
        ms = timed(run) / copies
        rows.append({'op': 'layer', 'variant': name, 'us': ms * 1e3, 'gbps': nbytes / ms / 1e6,
                     'shape': {'block_n': block_n, 'block_k': block_r * 8, 'split_k': 1,
                               'num_warps': num_warps}})
        print(f'layer    {name:15s} {ms * 1e3:7.2f} us {rows[-1]["gbps"]:7.0f} GB/s', flush=True)
    return rows


def probe(device, copies: int):
    config = KernelConfig.for_device(device)
    ops = KernelOps(config)
    rows = []
    for op, kind, n, k in step_shapes():
        shape = config.gemv(kind + '_q4', n, k)
        gate_up = kind == 'gate_up'
        split_k = shape.split_k if kind == 'matvec_add' else 1
        block_r = shape.block_k // 8
        weights = [random_weight(kind + '_q4', 2 * n if gate_up else n, k, device,
                                 torch.bfloat16) for _ in range(copies)]
        x = torch.randn(k, device=device)
        norm = torch.ones(k, device=device, dtype=torch.bfloat16)
        out = torch.zeros(2 * n if gate_up else n, device=device)
        nbytes = weights[0].nbytes   # codes and scales

        def engine():
            for w in weights:
                if kind == 'rms_matvec':
                    ops.rms_matvec(x, norm, w, None, 1e-5)
                elif gate_up:
                    ops.rms_gate_up_silu(x, norm, w, 1e-5)
                else:
                    ops.matvec_add(out, x, w)

        def variant(name):
            def run():
                for w in weights:
                    _probe_kernel[(n // shape.block_n, split_k)](
                        w.codes, w.scales, out, k // 8, n, w.codes.shape[1], 0x3C003C00,
                        0x3C00BC00, 0x40003C00, 0x3C004000, BLOCKED=name == 'load_blocked',
                        WORK=WORK[name], GATE_UP=gate_up, SPLIT_K=split_k,
                        BLOCK_R=block_r, BLOCK_N=shape.block_n,
                        AHEAD=2 if name == 'load_2_ahead' else 1, num_warps=shape.num_warps,
                        **(_pdl(device) if name == 'load_pdl' else {'PDL': False}))
            return run

        for name in VARIANTS + ('engine',):
            ms = timed(engine if name == 'engine' else variant(name)) / copies
            rows.append({'op': op, 'n': n, 'k': k, 'shape': shape.__dict__, 'variant': name,
                         'us': ms * 1e3, 'gbps': nbytes / ms / 1e6})
            print(f'{op:8s} {name:13s} {ms * 1e3:7.2f} us {rows[-1]["gbps"]:7.0f} GB/s',
                  flush=True)
        weights.clear()
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
              'copy_gbps': measure_copy_bandwidth(device),
              'rows': probe(device, args.copies) + probe_layer(device, args.copies)}
    with open(args.out, 'w') as f:
        json.dump(result, f, indent=1)


if __name__ == '__main__':
    main()
