"""
Compare decode backends on one GPU, on the same synthetic weights, at several contexts.

transformers eager, transformers StaticCache + CUDA graph, our eager and our graphed engine,
and for GPTQ models (``synthetic:ARCH:gptq``) our graphed 4-bit step and exllamav2's.

First a correctness check (our graphed step against transformers in bf16: logits error per step
and greedy tokens, with the top-2 gap where they part), then per (model, backend, ctx) one
session of the package's protocol (physinf_ros.bench.protocol.run_session: a fresh decoder, a
real prefill of ctx random tokens, warm-up steps, measured steps) and its median. R_floor comes
from the roofline of the loaded decoder (4-bit byte accounting for GPTQ) at the target's
datasheet bandwidth. Every cell runs one kernel configuration: config/kernels.yaml's for this
GPU, with --tuning's shapes and --kernel-flag's settings over it (one arm of an A/B). Writes
JSON with every sample.

    python3 benchmarks/engine_compare.py --models synthetic:llama-3.1-8b --out results.json
"""

import argparse
import json
import platform
import statistics

from physinf_ros.bench.protocol import Plan, run_session, vocab_size
from physinf_ros.engine import load, Sampling
from physinf_ros.engine.decoders import backends
from physinf_ros.engine.kernels.config import KernelConfig
from physinf_ros.engine.weights.resolve import resolve
from physinf_ros.measurement.roofline import decoder_floor
from physinf_ros.measurement.targets import detect
import torch
import transformers
import triton

EXLLAMA_WARMUP = 210   # exllamav2's per-layer graphs start after 205 calls at one shape


def check(model, kernel_config, steps=32, prompt_len=128):
    """Greedy decode with hf and graphed from one prompt: logits error, first divergence."""
    ours = load(model, backend='graphed', max_context=prompt_len + steps + 8,
                kernel_config=kernel_config)
    ref = load(model, backend='hf', max_context=prompt_len + steps + 8)
    ids = torch.randint(0, vocab_size(ours), (prompt_len,),
                        generator=torch.Generator().manual_seed(0)).tolist()
    greedy = Sampling()
    a, b = [ref.decoder.prefill(ids, greedy)], [ours.decoder.prefill(ids, greedy)]
    errors, divergence = [], None
    for step in range(steps):
        lr, lo = ref.decoder.last_logits(), ours.decoder.last_logits()
        errors.append(((lo - lr).norm() / lr.norm()).item())
        if a[-1] != b[-1]:
            top2 = torch.topk(lr, 2).values
            divergence = {'step': step, 'ref': a[-1], 'ours': b[-1],
                          'ref_top2_gap': (top2[0] - top2[1]).item(),
                          'ref_logit_of_ours': lr[b[-1]].item(), 'ref_max': top2[0].item()}
            break
        a.append(ref.decoder.step())
        b.append(ours.decoder.step())
    del ours, ref
    torch.cuda.empty_cache()
    return {'steps_compared': len(errors), 'logit_rel_error_max': max(errors),
            'logit_rel_error_median': statistics.median(errors), 'divergence': divergence}


def run_family(report, model, chosen, contexts, args, b_peak, kernel_config):
    """Time each backend of one family at each context: one protocol session per cell."""
    warmup = max(args.warmup, EXLLAMA_WARMUP) if chosen[0].startswith('exllamav2') else args.warmup
    plan = Plan(model=model, modes=tuple(chosen), contexts=tuple(contexts), steps=args.steps,
                warmup=warmup, sessions=1)
    engine = load(model, backend=chosen[0], max_context=plan.max_context(max(contexts)),
                  kernel_config=kernel_config)
    floor = decoder_floor(engine.decoder, b_peak)
    for backend in chosen:
        for ctx in contexts:
            try:
                # The session slot is the context: each context its own prompt, as before.
                ran, session = run_session(engine, plan, backend, ctx, ctx, lambda ms: None,
                                           lambda: False, lambda _: None)
                cell = {'backend': ran, 'ctx': ctx, 'prefill_ms': session.prefill_ms,
                        'step_ms_median': session.median_ms, 'step_ms': session.step_ms}
            except Exception as exc:  # noqa: B902 - record the failure, keep the rest
                cell = {'backend': backend, 'ctx': ctx, 'error': f'{type(exc).__name__}: '
                        f'{str(exc)[:300]}'}
            cell['model'] = model
            if 'step_ms_median' in cell:
                roof = floor.at(ctx, cell['step_ms_median'])
                cell.update(t_floor_ms=roof['t_floor_ms'], r_floor=roof['R_floor'],
                            W_bytes=roof['W_bytes'], K_bytes=roof['K_bytes'])
            report['cells'].append(cell)
            print(json.dumps({k: v for k, v in cell.items() if k != 'step_ms'}), flush=True)
            with open(args.out, 'w') as f:   # after every cell: a run cut short keeps its cells
                json.dump(report, f, indent=1)
    engine = None
    torch.cuda.empty_cache()


def kernel_config_from_args(args, parser) -> KernelConfig:
    """kernels.yaml's configuration for this GPU, then the sweep's shapes, then the flags."""
    config = KernelConfig.for_device(torch.device('cuda'))
    if args.tuning:   # the sweep's shapes win over config/kernels.yaml's
        with open(args.tuning) as f:
            config = config.with_tuning(json.load(f)['tuning'])
    for flag in args.kernel_flag:
        name, _, value = flag.partition('=')
        try:
            config = config.with_flag(name, value)
        except (TypeError, ValueError) as exc:
            parser.error(str(exc))
    return config


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--models', default='synthetic:llama-3.1-8b',
                        help='comma-separated model specs (a :gptq spec for the 4-bit step)')
    parser.add_argument('--backends', default='hf,hf-graphed,eager,graphed')
    parser.add_argument('--contexts', default='2048,8192,16384')
    parser.add_argument('--warmup', type=int, default=5)
    parser.add_argument('--steps', type=int, default=30)
    parser.add_argument('--tuning', help='kernel_sweep.py output: its launch shapes for the '
                        'kernel configuration of every cell')
    parser.add_argument('--kernel-flag', action='append', default=[], metavar='NAME=VALUE',
                        help='set a switch (0|1) or a number of the kernel configuration, for '
                             'one arm of an A/B (e.g. HALF2=0: 4-bit GEMVs in float32 '
                             'arithmetic; ATTENTION.splits=16)')
    parser.add_argument('--skip-check', action='store_true')
    parser.add_argument('--out', required=True)
    args = parser.parse_args(argv)
    kernel_config = kernel_config_from_args(args, parser)
    target = detect(torch.device('cuda'))
    contexts = [int(c) for c in args.contexts.split(',')]
    names = args.backends.split(',')
    report = {'models': args.models, 'gpu': torch.cuda.get_device_name(),
              'b_peak_gbps': target.bandwidth_gbs, 'torch': torch.__version__,
              'transformers': transformers.__version__, 'triton': triton.__version__,
              'python': platform.python_version(), 'warmup': args.warmup, 'steps': args.steps,
              'tuning': args.tuning, 'kernel_flags': args.kernel_flag,
              'kernel_config': kernel_config.facts(), 'cells': []}
    models = args.models.split(',')
    if not args.skip_check:
        report['check'] = check(models[0], kernel_config)
        print('check:', json.dumps(report['check']), flush=True)
    for model in models:
        quantization = resolve(model).quant_method
        for family in Plan(modes=tuple(names)).families():
            if backends.BY_NAME[family[0]].takes(quantization):
                run_family(report, model, family, contexts, args, target.bandwidth_gbs,
                           kernel_config)
    with open(args.out, 'w') as f:
        json.dump(report, f, indent=1)
    print(f'{"model":>28} {"backend":>12} {"ctx":>6} {"ms/step":>9} {"R_floor":>8}')
    for cell in report['cells']:
        head = f'{cell["model"]:>28} {cell["backend"]:>12} {cell["ctx"]:>6}'
        if 'error' in cell:
            print(f'{head} ERROR {cell["error"][:60]}')
        else:
            print(f'{head} {cell["step_ms_median"]:9.3f} {cell.get("r_floor", float("nan")):8.3f}')


if __name__ == '__main__':
    main()
