"""
Compare the four decode backends on one GPU, on the same synthetic weights, at several contexts.

transformers eager, transformers StaticCache + CUDA graph, our eager and our graphed engine.

First a correctness check (our graphed step against transformers in bf16: logits error per step
and greedy tokens, with the top-2 gap where they part), then per (backend, ctx) a fresh decoder,
a real prefill of ctx random tokens, warm-up steps and the median of measured steps, each step
timed with the device synchronised. Writes JSON with every sample.

    python3 benchmarks/engine_compare.py --model synthetic:llama-3.1-8b --out results.json
"""

import argparse
import json
import platform
import statistics
import time

from physinf_ros.engine import load, Sampling
from physinf_ros.engine.llama import ModelConfig
from physinf_ros.engine.models import resolve
import torch
import transformers
import triton

B_PEAK_GBPS = {'NVIDIA H200': 4800.0, 'NVIDIA H100 80GB HBM3': 3350.0}


def floor_ms(c: ModelConfig, ctx: int, gbps: float, elem: int = 2) -> float:
    """Memory floor (W + K) / B_peak: W counts one embedding row and the lm_head."""
    layer = (c.hidden_size * (c.q_size + 2 * c.kv_size) + c.q_size * c.hidden_size
             + 3 * c.hidden_size * c.intermediate_size + 2 * c.hidden_size)
    w = elem * (c.num_layers * layer + c.hidden_size * (c.vocab_size + 2))
    k = 2 * c.num_layers * c.kv_size * ctx * elem
    return (w + k) / gbps / 1e6


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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--model', default='synthetic:llama-3.1-8b')
    parser.add_argument('--backends', default='hf,hf-graphed,eager,graphed')
    parser.add_argument('--contexts', default='2048,8192,16384')
    parser.add_argument('--warmup', type=int, default=5)
    parser.add_argument('--steps', type=int, default=30)
    parser.add_argument('--tuning', help='kernel_sweep.py output to apply before timing')
    parser.add_argument('--skip-check', action='store_true')
    parser.add_argument('--out', required=True)
    args = parser.parse_args(argv)
    if args.tuning:
        from physinf_ros.engine import kernels
        kernels.apply_tuning(json.load(open(args.tuning))['tuning'])
    gpu = torch.cuda.get_device_name()
    config = ModelConfig.from_hf(resolve(args.model).hf_config)
    contexts = [int(c) for c in args.contexts.split(',')]
    backends = args.backends.split(',')
    report = {'model': args.model, 'gpu': gpu, 'b_peak_gbps': B_PEAK_GBPS.get(gpu),
              'torch': torch.__version__, 'transformers': transformers.__version__,
              'triton': triton.__version__, 'python': platform.python_version(),
              'warmup': args.warmup, 'steps': args.steps, 'cells': []}
    if not args.skip_check:
        report['check'] = check(args.model)
        print('check:', json.dumps(report['check']), flush=True)
    max_context = max(contexts) + args.warmup + args.steps + 8
    for family in (['hf', 'hf-graphed'], ['eager', 'graphed']):
        chosen = [b for b in family if b in backends]
        if not chosen:
            continue
        engine = load(args.model, backend=chosen[0], max_context=max_context)
        for backend in chosen:
            for ctx in contexts:
                try:
                    cell = time_cell(engine, backend, ctx, args.warmup, args.steps, seed=ctx)
                except Exception as exc:  # noqa: B902 - record the failure, keep the rest
                    cell = {'backend': backend, 'ctx': ctx, 'error': f'{type(exc).__name__}: '
                            f'{str(exc)[:300]}'}
                if 'step_ms_median' in cell and report['b_peak_gbps']:
                    cell['t_floor_ms'] = floor_ms(config, ctx, report['b_peak_gbps'])
                    cell['r_floor'] = cell['t_floor_ms'] / cell['step_ms_median']
                report['cells'].append(cell)
                print(json.dumps({k: v for k, v in cell.items() if k != 'step_ms'}), flush=True)
        engine = None
        torch.cuda.empty_cache()
    with open(args.out, 'w') as f:
        json.dump(report, f, indent=1)
    print(f'{"backend":>12} {"ctx":>6} {"ms/step":>9} {"R_floor":>8}')
    for cell in report['cells']:
        if 'error' in cell:
            print(f'{cell["backend"]:>12} {cell["ctx"]:>6} ERROR {cell["error"][:60]}')
        else:
            print(f'{cell["backend"]:>12} {cell["ctx"]:>6} {cell["step_ms_median"]:9.3f} '
                  f'{cell.get("r_floor", float("nan")):8.3f}')


if __name__ == '__main__':
    main()
