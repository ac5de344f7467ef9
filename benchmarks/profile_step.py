"""
Show where one graphed decode step spends its time.

Every kernel of the replayed graph, from the CUDA profiler, summed by kernel name, beside the
step's wall time and the gaps between kernels. With programmatic dependent launch a kernel starts
before its predecessor ends and waits inside, so these durations overlap and are no breakdown;
`--ncu-step` instead marks one step for Nsight Compute, which runs each kernel alone and reads
its time and DRAM bytes (benchmarks/kernel_table.py turns that into a table per layer op).
`--verify-k K` profiles a speculative verify step of K drafted tokens instead (its rows' choices
read on the host, as speculation reads them, then the position rewound so that each repeat
verifies at the same context); `--prefill N` a cold prefill of N tokens (the way the decoder
takes it: over rows up to 128 tokens, else op by op), each kernel's time also summed by kind
(matrix products, attention, our Triton kernels, the rest) to say what bounds it:

    python3 benchmarks/profile_step.py --model synthetic:llama-3.1-8b --ctx 2048 --out prof.json
    ncu --profile-from-start off --clock-control none --page raw --csv --print-units base \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,\
launch__grid_size,launch__registers_per_thread \
        python3 benchmarks/profile_step.py --ncu-step ... > step.csv
"""

import argparse
import json
import time

from engine_compare import kernel_config_from_args
from physinf_ros.engine import load, Sampling
import torch
from torch.profiler import profile, ProfilerActivity


def kernel_kind(name: str) -> str:
    """Say what a CUDA kernel is, by its name: matmul, attention, triton or other."""
    lower = name.lower()
    if name.startswith('_') and name.endswith('_kernel'):   # ours (ops_triton.py)
        return 'triton'
    if any(part in lower for part in ('gemm', 'gemv', 'cutlass', 'xmma', 'nvjet', 'cublas')):
        return 'matmul'
    if any(part in lower for part in ('flash', 'fmha', 'attn', 'attention')):
        return 'attention'
    return 'other'


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--model', default='synthetic:llama-3.1-8b')
    parser.add_argument('--ctx', type=int, default=2048)
    parser.add_argument('--steps', type=int, default=20)
    parser.add_argument('--tuning', help='kernel_sweep.py output: its launch shapes over '
                        'those of config/kernels.yaml')
    parser.add_argument('--kernel-flag', action='append', default=[], metavar='NAME=VALUE',
                        help='set a switch or number of the kernel configuration (an A/B arm)')
    parser.add_argument('--ncu-step', action='store_true',
                        help='only mark one warm step as the profiled range (run under ncu)')
    parser.add_argument('--verify-k', type=int, default=0, metavar='K',
                        help='profile a verify step of K drafted tokens (docs/SPECULATION.md)')
    parser.add_argument('--prefill', type=int, default=0, metavar='N',
                        help='profile a cold prefill of N tokens instead of a step')
    parser.add_argument('--out', help='where the JSON goes (not with --ncu-step)')
    args = parser.parse_args(argv)
    if not args.ncu_step and not args.out:
        parser.error('--out is required unless --ncu-step')
    kernel_config = kernel_config_from_args(args, parser)
    engine = load(args.model, backend='graphed',
                  max_context=max(args.ctx, args.prefill) + 2 * args.steps + 16,
                  kernel_config=kernel_config)
    decoder = engine.decoder
    first = decoder.prefill(torch.randint(0, 1000, (args.ctx,)).tolist(), Sampling())
    draft = list(range(1, args.verify_k + 1))
    prompt = torch.randint(0, 1000, (args.prefill,)).tolist()
    decoder.reuse_prefix = not args.prefill   # every prefill profiled cold

    def step():
        if args.prefill:
            decoder.prefill(prompt, Sampling())
            return
        if not args.verify_k:
            decoder.step()
            return
        decoder.verify(draft).argmax(-1).tolist()
        decoder.rewind(args.ctx, first)

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    if args.ncu_step:
        torch.cuda.cudart().cudaProfilerStart()
        step()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
        return
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    wall_ms = (time.perf_counter() - start) * 1000 / args.steps
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(args.steps):
            step()
        torch.cuda.synchronize()
    kernels = {}
    spans = []
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            row = kernels.setdefault(event.name, {'count': 0, 'us': 0.0})
            row['count'] += 1
            row['us'] += event.device_time
            spans.append((event.time_range.start, event.time_range.end))
    busy_us = sum(r['us'] for r in kernels.values()) / args.steps
    spans.sort()
    gaps = [b[0] - a[1] for a, b in zip(spans, spans[1:]) if 0 <= b[0] - a[1] < 1000]
    by_kind = {}
    for name, row in kernels.items():
        kind = kernel_kind(name)
        by_kind[kind] = by_kind.get(kind, 0.0) + row['us'] / args.steps
    report = {'model': args.model, 'ctx': args.ctx, 'verify_k': args.verify_k,
              'prefill_tokens': args.prefill,
              'wall_ms_per_step': wall_ms,
              'kernel_us_per_step': busy_us,
              'kernels_per_step': sum(r['count'] for r in kernels.values()) / args.steps,
              'median_gap_us': sorted(gaps)[len(gaps) // 2] if gaps else None,
              'gap_us_per_step': sum(gaps) / args.steps,
              'by_kind_us': dict(sorted(by_kind.items(), key=lambda kv: -kv[1])),
              'by_kernel': {name: {'count': r['count'] / args.steps, 'us': r['us'] / args.steps}
                            for name, r in sorted(kernels.items(), key=lambda kv: -kv[1]['us'])}}
    with open(args.out, 'w') as f:
        json.dump(report, f, indent=1)
    print(f'wall {wall_ms:.3f} ms/step; kernels {busy_us / 1000:.3f} ms in '
          f'{report["kernels_per_step"]:.0f} launches; gaps {report["gap_us_per_step"]:.0f} us '
          f'(median {report["median_gap_us"]} us)')
    print('  '.join(f'{kind} {us / 1000:.3f} ms' for kind, us in report['by_kind_us'].items()))
    for name, row in list(report['by_kernel'].items())[:14]:
        print(f'{row["us"]:9.1f} us {row["count"]:5.0f}x  {name[:90]}')


if __name__ == '__main__':
    main()
