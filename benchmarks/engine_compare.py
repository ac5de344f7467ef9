"""
Compare decode backends on one GPU, on the same synthetic weights, at several contexts.

transformers eager, transformers StaticCache + CUDA graph, our eager and our graphed engine,
and for GPTQ models (``synthetic:ARCH:gptq``) our graphed 4-bit step and exllamav2's.

First a correctness check (our graphed step against transformers in bf16: logits error per step
and greedy tokens, with the top-2 gap where they part), then per (model, backend, ctx)
a fresh decoder, a real prefill of ctx random tokens, warm-up steps and the median of measured
steps, each step timed with the device synchronised. R_floor comes from the roofline of the
loaded decoder (4-bit byte accounting for GPTQ) at the target's datasheet bandwidth. Writes JSON
with every sample.

    python3 benchmarks/engine_compare.py --models synthetic:llama-3.1-8b --out results.json
"""

import argparse
import json
import platform
import statistics
import time

from physinf_ros.engine import kernels, load, Sampling
from physinf_ros.roofline import decoder_floor
from physinf_ros.targets import detect
import torch
import transformers
import triton

FAMILIES = (['hf', 'hf-graphed'], ['eager', 'graphed'], ['exllamav2'])
EXLLAMA_WARMUP = 210   # exllamav2's per-layer graphs start after 205 calls at one shape


def check(model, steps=32, prompt_len=128):
    """Greedy decode with hf and graphed from one prompt: logits error, first divergence."""
    ours = load(model, backend='graphed', max_context=prompt_len + steps + 8)
    ref = load(model, backend='hf', max_context=prompt_len + steps + 8)
    ids = torch.randint(0, ours.decoder.weights.config.vocab_size, (prompt_len,),
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


def time_cell(engine, backend, ctx, warmup, steps, seed):
    decoder = engine.renew(backend)
    vocab = 1000
    ids = torch.randint(0, vocab, (ctx,), generator=torch.Generator().manual_seed(seed)).tolist()
    torch.cuda.synchronize()
    start = time.perf_counter()
    decoder.prefill(ids, Sampling())
    torch.cuda.synchronize()
    prefill_ms = (time.perf_counter() - start) * 1000
    for _ in range(warmup):
        decoder.step()
    samples = []
    for _ in range(steps):
        start = time.perf_counter()
        decoder.step()
        samples.append((time.perf_counter() - start) * 1000)
    return {'backend': decoder.info.backend, 'ctx': ctx, 'prefill_ms': prefill_ms,
            'step_ms_median': statistics.median(samples), 'step_ms': samples}


def run_family(report, model, chosen, contexts, args, b_peak):
    warmup = max(args.warmup, EXLLAMA_WARMUP) if chosen[0].startswith('exllamav2') else args.warmup
    max_context = max(contexts) + warmup + args.steps + 8
    engine = load(model, backend=chosen[0], max_context=max_context)
    floor = decoder_floor(engine.decoder, b_peak)
    for backend in chosen:
        for ctx in contexts:
            try:
                cell = time_cell(engine, backend, ctx, warmup, args.steps, seed=ctx)
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--models', default='synthetic:llama-3.1-8b',
                        help='comma-separated model specs (a :gptq spec for the 4-bit step)')
    parser.add_argument('--backends', default='hf,hf-graphed,eager,graphed')
    parser.add_argument('--contexts', default='2048,8192,16384')
    parser.add_argument('--warmup', type=int, default=5)
    parser.add_argument('--steps', type=int, default=30)
    parser.add_argument('--tuning', help='kernel_sweep.py output to apply before timing')
    parser.add_argument('--kernel-flag', action='append', default=[], metavar='NAME=VALUE',
                        help='set a switch (0|1) or a number of physinf_ros.engine.kernels, or '
                             'an entry of one of its tables, for an A/B (e.g. HALF2=0: 4-bit '
                             'GEMVs in float32 arithmetic; ATTENTION.splits=16)')
    parser.add_argument('--skip-check', action='store_true')
    parser.add_argument('--out', required=True)
    args = parser.parse_args(argv)
    if args.tuning:   # the sweep's shapes win over config/kernels.yaml's
        kernels.load_tuning(torch.device('cuda'))
        kernels.apply_tuning(json.load(open(args.tuning))['tuning'])
    flags = {}
    for flag in args.kernel_flag:
        name, value = flag.split('=')
        table, _, key = name.rpartition('.')   # ATTENTION.out_heads: an entry of a table
        owner = getattr(kernels, table) if table else vars(kernels)
        current = owner.get(key) if isinstance(owner, dict) else None
        if isinstance(current, bool):
            flags[name] = value == '1'
        elif isinstance(current, int):
            flags[name] = int(value)
        else:
            parser.error(f'{name} is not a switch or number of physinf_ros.engine.kernels')
        owner[key] = flags[name]
    target = detect(torch.device('cuda'))
    contexts = [int(c) for c in args.contexts.split(',')]
    backends = args.backends.split(',')
    report = {'models': args.models, 'gpu': torch.cuda.get_device_name(),
              'b_peak_gbps': target.bandwidth_gbs, 'torch': torch.__version__,
              'transformers': transformers.__version__, 'triton': triton.__version__,
              'python': platform.python_version(), 'warmup': args.warmup, 'steps': args.steps,
              'tuning': args.tuning, 'kernel_flags': flags, 'cells': []}
    models = args.models.split(',')
    if not args.skip_check:
        report['check'] = check(models[0])
        print('check:', json.dumps(report['check']), flush=True)
    for model in models:
        for family in FAMILIES:
            chosen = [b for b in family if b in backends]
            if chosen and usable(model, family):
                run_family(report, model, chosen, contexts, args, target.bandwidth_gbs)
    with open(args.out, 'w') as f:
        json.dump(report, f, indent=1)
    print(f'{"model":>28} {"backend":>12} {"ctx":>6} {"ms/step":>9} {"R_floor":>8}')
    for cell in report['cells']:
        head = f'{cell["model"]:>28} {cell["backend"]:>12} {cell["ctx"]:>6}'
        if 'error' in cell:
            print(f'{head} ERROR {cell["error"][:60]}')
        else:
            print(f'{head} {cell["step_ms_median"]:9.3f} {cell.get("r_floor", float("nan")):8.3f}')


def usable(model, family):
    """Say whether family runs model: transformers float only, exllamav2 GPTQ only."""
    gptq = model.endswith(':gptq')
    return not ((gptq and family is FAMILIES[0]) or (not gptq and family is FAMILIES[2]))


if __name__ == '__main__':
    main()
