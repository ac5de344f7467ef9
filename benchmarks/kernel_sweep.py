"""
Sweep the decode kernels' launch shapes on the real weight shapes of a model; pick the fastest.

Each GEMV is timed over as many copies of its weight as one step reads (one per layer), so the
weights come from HBM as in a real step rather than from L2, and the launches are captured in a
CUDA graph and replayed, as in the graphed engine, so the host's launch cost does not hide the
kernels' own time. The lm_head is timed as the greedy step runs it, its argmax in the GEMV's
epilogue (greedy_head). Prints achieved GB/s per config beside cuBLAS
(torch.nn.functional.linear, M=1; M=--rows for the rows_ kinds; no argmax) timed the same way,
and writes JSON.

    python3 benchmarks/kernel_sweep.py --model synthetic:llama-3.1-8b --out sweep.json
"""

import argparse
from dataclasses import asdict, replace
import itertools
import json
import time

from physinf_ros.engine.kernels import ops_torch, q4_cuda
from physinf_ros.engine.kernels.config import KernelConfig
from physinf_ros.engine.kernels.ops_triton import KernelOps
from physinf_ros.engine.kernels.q4_cuda import Q4Shape
from physinf_ros.engine.kernels.shapes import AttentionConfig, GemvConfig
from physinf_ros.engine.model.config import ModelConfig
from physinf_ros.engine.model.llama import rope_tables
from physinf_ros.engine.weights.gptq import PackedLinear
from physinf_ros.engine.weights.resolve import resolve
from physinf_ros.measurement.targets import measure_copy_bandwidth
import torch
import triton


def timed(fn):
    """Median ms of one replay of fn captured in a CUDA graph (compiled and warmed first)."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return triton.testing.do_bench(graph.replay, warmup=5, rep=25, return_mode='median')


def gemv_cases(c: ModelConfig):
    """
    Return (kind, N, K, copies) for each GEMV of one decode step.

    bf16, 4-bit in Triton (_q4) and 4-bit in CUDA (_q4cuda); a verify step's over rows (rows_,
    16- and 4-bit).
    """
    h, i = c.hidden_size, c.intermediate_size
    layers = c.num_layers

    def layer(residual):
        return [('rms_matvec', c.q_size + 2 * c.kv_size, h, layers),
                (residual, h, c.q_size, layers),
                ('gate_up', i, h, layers),
                (residual, h, i, layers)]

    # Gemma 3 norms o_proj's and down's outputs before the residual add (matvec_norm_add): the
    # step runs those GEMVs as the rms_matvec kind without a norm, the rows ops as
    # rows_matvec_add into zeros (ops_triton.rows_matvec_norm_add).
    step = layer('rms_matvec' if c.family == 'gemma3' else 'matvec_add')
    rows = layer('matvec_add')
    return (step + [('rms_matvec', c.vocab_size, h, 2)]
            + [(kind + '_q4', n, k, copies) for kind, n, k, copies in step]
            + [(kind + '_q4cuda', n, k, copies) for kind, n, k, copies in step]
            + [('rows_' + kind, n, k, copies) for kind, n, k, copies in
               rows + [('rms_matvec', c.vocab_size, h, 2)]]
            + [('rows_' + kind + '_q4', n, k, copies) for kind, n, k, copies in rows])


CANDIDATES = {
    'rms_matvec': [GemvConfig(bn, bk, 1, w) for bn, bk, w in
                   itertools.product((2, 4, 8, 16, 32), (256, 512, 1024), (4, 8))],
    # Gate/up also with two tiles of each half ahead of its wait (v24 gave the others theirs).
    'gate_up': [GemvConfig(bn, bk, 1, w, a) for bn, bk, w, a in
                itertools.product((4, 8, 16), (256, 512, 1024), (4, 8), (1, 2))],
    'matvec_add': [GemvConfig(bn, bk, s, w) for bn, bk, s, w in
                   itertools.product((4, 8, 16, 32), (512, 1024), (1, 2, 4), (4, 8))],
    # 4-bit codes: block_k inputs (block_k / 8 rows of GPTQ words) by block_n outputs.
    # Wide tiles and many splits too: under Nsight Compute the 4-bit QKV and o_proj moved only
    # ~1.1 TB/s with the first 4-bit shapes, too few bytes in flight per SM (docs/PERF.md, v8a;
    # results/h200/profile_s6/).
    'rms_matvec_q4': [GemvConfig(bn, bk, 1, w) for bn, bk, w in
                      itertools.product((8, 16, 32), (256, 512, 1024, 2048), (4, 8))],
    'gate_up_q4': [GemvConfig(bn, bk, 1, w) for bn, bk, w in
                   itertools.product((16, 32, 64, 128), (256, 512, 1024), (4, 8))],
    'matvec_add_q4': [GemvConfig(bn, bk, s, w) for bn, bk, s, w in
                      itertools.product((32, 64), (256, 512, 1024), (8, 16), (4, 8))],
    # CUDA 4-bit (q4_gemv.cu): block_n columns per block, block_k inputs per thread step
    # (8 word rows, or 4 for gate/up), K splits where the output accumulates; 8 warps.
    'rms_matvec_q4cuda': [Q4Shape(c, u, 1).as_gemv() for c, u in
                          itertools.product(q4_cuda.COLUMNS, (4, 8))],
    'gate_up_q4cuda': [Q4Shape(c, 4, 1).as_gemv() for c in q4_cuda.COLUMNS],
    # A verify step's GEMVs over --rows rows (ops_triton.rows_*): tl.dot tiles, 16 outputs at
    # the least; tiles_ahead is their pipeline's depth less 2 (more bytes in flight a program:
    # the rows GEMVs streamed at 1.7 TB/s untuned, docs/PERF.md).
    'rows_rms_matvec': [GemvConfig(bn, bk, 1, 4, a) for bn, bk, a in
                        itertools.product((16, 32, 64), (128, 256), (1, 3))],
    # Gate/up loads two weight tiles a step: wide and short ones (16 outputs streamed at 1.0
    # TB/s, 64 at 2.5 on an H100, 64 x 256 out of shared memory: rowsweep at 80d5b88).
    'rows_gate_up': [GemvConfig(bn, bk, 1, w, a) for bn, bk, w, a in
                     itertools.product((32, 64, 128), (64, 128), (4, 8), (1, 3))],
    # Residual GEMVs of few outputs (the 1B's 2048, the 135M's 576) need K splits for enough
    # programs: at 32 outputs and no split the 1B's verify ran 64 programs of 64 tiles each.
    'rows_matvec_add': [GemvConfig(bn, bk, s, 4, a) for bn, bk, s, a in
                        itertools.product((16, 32, 64), (128, 256), (1, 2, 4, 8), (1, 3))],
    # The same over 4-bit codes (ops_triton._rows_q4_kernel): block_k is cut to the group size.
    'rows_rms_matvec_q4': [GemvConfig(bn, 128, 1, 4, a) for bn, a in
                           itertools.product((16, 32, 64), (1, 2))],
    'rows_gate_up_q4': [GemvConfig(bn, 128, 1, 4, a) for bn, a in
                        itertools.product((16, 32, 64), (1, 2))],
    'rows_matvec_add_q4': [GemvConfig(bn, 128, s, 4, a) for bn, s, a in
                           itertools.product((32, 64), (2, 4, 8), (1, 2))],
    'matvec_add_q4cuda': [Q4Shape(c, u, s).as_gemv() for c, u, s in
                          itertools.product(q4_cuda.COLUMNS, (4, 8), q4_cuda.SPLITS)],
}
GROUP_SIZE = 128   # the paper's GPTQ checkpoints
ROWS = 5   # the rows_ kinds' rows unless --rows: a verify step of 4 drafted tokens


# The op of an ops module (KernelOps or ops_torch) that runs each kind, 16- and 4-bit alike; the
# rows ops name gate/up without the norm they fuse.
KIND_OPS = {'rms_matvec': 'rms_matvec', 'gate_up': 'rms_gate_up_silu', 'matvec_add': 'matvec_add',
            'rows_rms_matvec': 'rows_rms_matvec', 'rows_gate_up': 'rows_gate_up_silu',
            'rows_matvec_add': 'rows_matvec_add'}


def kind_op(ops, kind):
    """Return the function of an ops module (KernelOps or ops_torch) that runs a GEMV kind."""
    return getattr(ops, KIND_OPS[kind.split('_q4')[0]])


def random_weight(kind, rows, k, device, dtype):
    """Return a random weight in kind's format: bf16 [rows, k], or 4-bit in groups of 128."""
    if '_q4' not in kind:
        return torch.randn(rows, k, device=device).to(dtype) * 0.02
    codes = torch.randint(-2 ** 31, 2 ** 31 - 1, (k // 8, rows), dtype=torch.int32,
                          device=device)
    scales = (torch.rand(k // GROUP_SIZE, rows, device=device) * 0.01).half()
    return PackedLinear(codes, scales, None, GROUP_SIZE, dtype)


def sweep_gemv(kind, n, k, copies, device, dtype, base_config: KernelConfig, rows_in=ROWS,
               head=False):
    """
    Time every candidate launch shape of one GEMV, each in its own kernel configuration.

    head: the lm_head as the greedy step runs it (greedy_head: the argmax in the GEMV's
    epilogue, whose cost grows with the rows a program, and the kernel that ends the step).
    """
    base = kind.split('_q4')[0]
    # The rows_ kinds run ops.rows_* over rows_in input rows (the same functions of ops_torch
    # are the reference and cuBLAS's matrix products).
    prefix = 'rows_' if base.startswith('rows_') else ''
    base = base[len(prefix):]
    lead = (rows_in,) if prefix else ()
    # The Triton 4-bit kinds are timed with the CUDA kernels switched off; the rows kernels
    # take all the rows (a 16-bit one past 16 only where rows_max lets it, a 4-bit one below
    # q4_rows_min too, which would run the step's GEMV once a row).
    base_config = replace(base_config, q4_cuda=kind.endswith('_q4cuda'),
                          rows_max=max(base_config.rows_max, min(rows_in, 64)), q4_rows_min=1)
    rows = 2 * n if base == 'gate_up' else n
    weights = [random_weight(kind, rows, k, device, dtype) for _ in range(copies)]
    x = torch.randn(*lead, k, device=device)
    norm = torch.ones(k, device=device, dtype=dtype)
    bytes_read = weights[0].nbytes * copies

    logits = torch.empty(n, device=device)
    token = torch.zeros(1, dtype=torch.long, device=device)
    pos = torch.zeros(1, dtype=torch.int32, device=device)

    def run(ops):
        for w in weights:
            if head:
                ops.greedy_head(x, norm, w, 1e-5, logits, token, pos, None)
            elif base == 'matvec_add':
                kind_op(ops, kind)(out, x, w)
            elif base == 'rms_matvec':
                kind_op(ops, kind)(x, norm, w, None, 1e-5)
            else:
                kind_op(ops, kind)(x, norm, w, 1e-5)

    def one(ops, w):   # one GEMV's output, for the correctness check
        if head and ops is not ops_torch:
            ops.greedy_head(x, norm, w, 1e-5, logits, token, pos, None)
            if token.item() != torch.argmax(logits).item():
                raise ValueError(f'wrong argmax: token {token.item()}')
            return logits.clone()
        if base == 'rms_matvec':
            return kind_op(ops, kind)(x, norm, w, None, 1e-5)
        if base == 'gate_up':
            return kind_op(ops, kind)(x, norm, w, 1e-5)
        y = torch.zeros(*lead, n, device=device)
        kind_op(ops, kind)(y, x, w)
        return y

    expected = one(ops_torch, weights[0]).float()
    out = torch.zeros(*lead, n, device=device)
    results = []
    for cfg in CANDIDATES[kind]:
        ops = KernelOps(base_config.with_gemv(kind, n, k, cfg))
        try:
            error = ((one(ops, weights[0]) - expected).norm() / expected.norm()).item()
            if not error < 2e-2:   # bf16 rounding of the reference; a wrong tile is order one
                raise ValueError(f'wrong result: relative error {error:.3g}')
            ms = timed(lambda: run(ops))
        except Exception as exc:  # noqa: B902 - a config that fails to compile is skipped
            results.append({'config': cfg.__dict__, 'error': str(exc)[:200]})
            continue
        results.append({'config': cfg.__dict__, 'ms': ms, 'gbps': bytes_read / ms / 1e6,
                        'rel_error': error})
    ok = [r for r in results if 'ms' in r]
    best = min(ok, key=lambda r: r['ms'])
    cublas_ms = None   # cuBLAS has no 4-bit GEMV to compare with
    if '_q4' not in kind:
        xb = x.to(dtype) if prefix else x.to(dtype)[None]
        cublas_ms = timed(lambda: [torch.nn.functional.linear(xb, w) for w in weights])
    print(f'  {kind} {n}x{k}: {len(ok)} configs, {len(results) - len(ok)} failed', flush=True)
    weights.clear()
    torch.cuda.empty_cache()
    return {'kind': kind, 'head': head, 'n': n, 'k': k, 'copies': copies, 'bytes': bytes_read,
            'best': best, 'cublas_ms': cublas_ms,
            'cublas_gbps': bytes_read / cublas_ms / 1e6 if cublas_ms else None,
            'all': results}


def sweep_attention(c: ModelConfig, contexts, device, dtype, base_config: KernelConfig):
    """Time attention (RoPE, cache write, splits, merge) per layer for each shape and ctx."""
    out = []
    layers = 8  # rotate over caches larger than L2
    max_context = max(contexts)
    shape = (layers, c.num_kv_heads, max_context, c.head_dim)
    k_cache = torch.randn(shape, device=device).to(dtype)
    v_cache = torch.randn(shape, device=device).to(dtype)
    qkv = torch.randn((c.num_heads + 2 * c.num_kv_heads) * c.head_dim, device=device)
    cos, sin = rope_tables(c, max_context, device)
    for ctx in contexts:
        pos = torch.tensor([ctx - 1], dtype=torch.int32, device=device)
        kv_bytes = 2 * c.num_kv_heads * c.head_dim * ctx * k_cache.element_size()
        rows = []
        for splits, min_chunk, block_t in itertools.product((16, 32, 64), (64, 128, 256, 512),
                                                            (32, 64)):
            # Each candidate replaces this shape's entry (its other fields kept) for every shape.
            candidate = replace(base_config.attention_for(c.num_kv_heads, c.head_dim),
                                splits=splits, min_chunk=min_chunk, block_t=block_t)
            ops = KernelOps(replace(base_config, attention=candidate, attention_shapes={}))
            try:
                ms = timed(lambda: [ops.rope_attention(qkv, pos, cos, sin, k_cache[i],
                                                       v_cache[i], c.num_heads)
                                    for i in range(layers)]) / layers
            except Exception as exc:  # noqa: B902 - record and go on
                rows.append({'splits': splits, 'min_chunk': min_chunk, 'block_t': block_t,
                             'error': str(exc)[:200]})
                continue
            rows.append({'splits': splits, 'min_chunk': min_chunk, 'block_t': block_t,
                         'us_per_layer': ms * 1000, 'gbps': kv_bytes / ms / 1e6})
        ok = [r for r in rows if 'us_per_layer' in r]
        out.append({'ctx': ctx, 'kv_bytes_per_layer': kv_bytes,
                    'best': min(ok, key=lambda r: r['us_per_layer']), 'all': rows})
    return out


def best_attention(rows):
    """Pick the one launch shape (a graph serves every length) least summed over contexts."""
    totals = {}
    for row in rows:
        for r in row['all']:
            if 'us_per_layer' in r:
                key = (r['splits'], r['min_chunk'], r['block_t'])
                totals[key] = totals.get(key, 0.0) + r['us_per_layer']
    splits, min_chunk, block_t = min(totals, key=totals.get)
    return asdict(AttentionConfig(splits, min_chunk, block_t))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--model', default='synthetic:llama-3.1-8b')
    parser.add_argument('--contexts', default='2048,8192,16384')
    parser.add_argument('--kinds', help='comma-separated GEMV kinds to sweep (default: all, '
                        "bf16, _q4, _q4cuda and the verify step's rows_); the others keep "
                        'their tuned shapes')
    parser.add_argument('--skip-attention', action='store_true')
    parser.add_argument('--rows', type=int, default=ROWS,
                        help="input rows of the rows_ kinds (a prompt's 32 or 64: the 16-bit "
                        'ones run with rows_max raised to take them)')
    parser.add_argument('--out', required=True)
    args = parser.parse_args(argv)
    config = ModelConfig.from_hf(resolve(args.model).hf_config)
    kinds = args.kinds.split(',') if args.kinds else None
    unknown = set(kinds or ()) - set(CANDIDATES)
    if unknown:
        parser.error(f'--kinds {",".join(sorted(unknown))}: not a GEMV kind; the kinds are '
                     f'{", ".join(sorted(CANDIDATES))}')
    for kind in sorted(set(kinds or ()) - {case[0] for case in gemv_cases(config)}):
        print(f'no GEMV of {args.model} is of kind {kind}', flush=True)   # (Gemma 3: matvec_add)
    device, dtype = torch.device('cuda'), torch.bfloat16
    start = time.time()
    report = {'model': args.model, 'gpu': torch.cuda.get_device_name(),
              'copy_gbps': measure_copy_bandwidth(device), 'gemv': [], 'attention': []}
    # Shapes not swept keep config/kernels.yaml's; each candidate is a configuration of its own.
    base_config = KernelConfig.for_device(device)

    def save():   # after every shape: a sweep cut short still leaves its results
        report['tuning'] = {
            'attention': (best_attention(report['attention']) if report['attention']
                          else asdict(base_config.attention)),
            'gemv': [{'kind': r['kind'], 'n': r['n'], 'k': r['k'], **r['best']['config']}
                     for r in report['gemv']]}
        report['sweep_s'] = time.time() - start
        with open(args.out, 'w') as f:
            json.dump(report, f, indent=1)

    for kind, n, k, copies in gemv_cases(config):
        if kinds and kind not in kinds:
            continue
        # The vocabulary GEMV is timed as the greedy step runs it (docs/PERF.md, 7313861).
        head = kind == 'rms_matvec' and n == config.vocab_size
        row = sweep_gemv(kind, n, k, copies, device, dtype, base_config, args.rows, head)
        report['gemv'].append(row)
        save()
        print(f'{kind:>10} {n:>6}x{k:<6}{" (head)" if head else ""} best '
              f'{row["best"]["gbps"]:7.0f} GB/s {row["best"]["config"]}  '
              f'cuBLAS {row["cublas_gbps"] or 0:7.0f} GB/s', flush=True)
    contexts = [int(c) for c in args.contexts.split(',')]
    if not args.skip_attention:
        report['attention'] = sweep_attention(config, contexts, device, dtype, base_config)
    for row in report['attention']:
        best = row['best']
        print(f'attention ctx {row["ctx"]:>6}: {best["us_per_layer"]:6.1f} us/layer '
              f'{best["gbps"]:6.0f} GB/s {best}', flush=True)
    save()
    print('tuning:', json.dumps(report['tuning']))
    print(f'copy {report["copy_gbps"]:.0f} GB/s; sweep took {report["sweep_s"]:.0f} s')


if __name__ == '__main__':
    main()
