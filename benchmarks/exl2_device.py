#!/usr/bin/env python3
"""
ExLlamaV2 0.3.2 on the GPU machine in one run: build, models, checks, timings (no ROS).

    python benchmarks/exl2_device.py --out exl2.json --embedded DIR [--contexts 2048 8192 16384]
        [--caches fp16 q4 q8] [--synthetic-dir DIR] [--bf16] [--pytest] [--keep]

Every phase runs in its own try/except: a failure is recorded (with its traceback) in the
JSON and the next phase still runs. Phases:
  build      import exllamav2: JIT-builds its CUDA extension (MAX_JOBS=16,
             TORCH_CUDA_ARCH_LIST=9.0 unless set) or loads it from torch's extension cache
  synthetic  synthetic:llama-3.1-8b as a GPTQ directory (random 4-bit, g128), streamed to disk
  quantise   the embedded model (--embedded: its converted float directory) RTN-quantised
  checks     on that quantised model: greedy replies per KV cache kind, prefill logits vs the
             same weights dequantised to float32, causality, top-1 agreement vs bfloat16
  stock      the stock exllamav2 step on the synthetic 8B: the median of its first 30 steps
             (before its own graphs start at call 205), then per KV cache kind and context the
             median of 30 steps after 210 warm-up steps; R_floor against the GPU's B_peak
             (config/targets.yaml, as everywhere: physinf_ros.measurement.roofline and .targets)
  profile    three warm steps under torch.profiler: host launches, graph launches, syncs,
             kernels, aten ops, GPU busy time per step
  gemv       the step's 224 quantised GEMVs and its fp16 head through exllamav2's
             gemm_half_q_half, launched from Python and replayed from one CUDA graph
  bf16       (--bf16) our graphed bf16 step on synthetic:llama-3.1-8b at the same contexts
  pytest     (--pytest) the GPU tests, test/engine/decoders/test_exllamav2.py
  plot       ms/step and R_floor against context, next to the JSON (needs matplotlib)
A step is timed as the decoder times it: forward plus argmax, read back to the host. Contexts
are reached by setting the cache length (the work of a step does not depend on the cached
values), so no 16k-token prefill is needed.
"""

import argparse
import json
import os
from pathlib import Path
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))   # run from a checkout, installed or not

from physinf_ros.engine import load, Sampling  # noqa: E402
from physinf_ros.engine.decoders.agreement import (  # noqa: E402
    decoder_agreement, TEXT, top1_agreement)
from physinf_ros.engine.decoders.exllama import KV_BYTES_PER_ELEMENT  # noqa: E402
from physinf_ros.engine.model.config import ModelConfig  # noqa: E402
from physinf_ros.engine.weights import gptq, gptq_files  # noqa: E402
from physinf_ros.engine.weights.source import read_config, synthetic_config  # noqa: E402
from physinf_ros.measurement.roofline import (  # noqa: E402
    Dense, kv_bytes, t_floor_s, weight_bytes_per_step)
from physinf_ros.measurement.targets import detect  # noqa: E402
import torch  # noqa: E402

ARCH = 'llama-3.1-8b'
WARM_STEPS = 210           # exllamav2 captures its per-layer graphs at call 205
MEASURED = 30
QUESTION = 'What is the capital of France?'


def median_ms(times):
    return round(statistics.median(times), 4)


def floor_fields(w: int, w_all: int, kv: float, step_ms: float, bandwidth: float) -> dict:
    t_floor = t_floor_s(w, kv, bandwidth) * 1e3
    t_floor_all = t_floor_s(w_all, kv, bandwidth) * 1e3
    return {'t_floor_ms': round(t_floor, 4), 'R_floor': round(t_floor / step_ms, 4),
            't_floor_all_ms': round(t_floor_all, 4),
            'R_floor_all': round(t_floor_all / step_ms, 4)}


class Run:
    """Phases with their results, written to JSON after each one."""

    def __init__(self, out: Path):
        self.out = out
        self.record = {'started': time.strftime('%Y-%m-%d %H:%M:%S'), 'phases': {}}
        self.state = {}

    def phase(self, name, fn, *args):
        print(f'[exl2] {name} ...', flush=True)
        start = time.perf_counter()
        entry = {}
        try:
            entry.update(fn(*args) or {})
            entry['ok'] = True
        except BaseException as exc:  # noqa: B902 - record everything, keep going
            if isinstance(exc, KeyboardInterrupt):
                raise
            entry.update(ok=False, error=f'{type(exc).__name__}: {exc}',
                         traceback=traceback.format_exc())
            print(entry['traceback'], file=sys.stderr, flush=True)
        entry['seconds'] = round(time.perf_counter() - start, 2)
        self.record['phases'][name] = entry
        self.out.write_text(json.dumps(self.record, indent=2))
        print(f'[exl2] {name}: {"ok" if entry["ok"] else entry["error"]} '
              f'({entry["seconds"]} s)', flush=True)
        return entry


def environment() -> dict:
    info = {'python': platform.python_version(), 'torch': torch.__version__,
            'cuda': torch.version.cuda,
            'gpu': torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            'MAX_JOBS': os.environ['MAX_JOBS'],
            'TORCH_CUDA_ARCH_LIST': os.environ['TORCH_CUDA_ARCH_LIST']}
    for name in ('flash_attn', 'xformers', 'tokenizers', 'triton'):
        try:
            info[name] = __import__(name).__version__
        except ImportError:
            info[name] = None
    return info


def build(run: Run) -> dict:
    threads = torch.get_num_threads()
    from physinf_ros.engine.decoders.exllama import import_exllamav2
    exllamav2 = import_exllamav2(torch.device('cuda'))
    from exllamav2 import attn
    return {'version': exllamav2.__version__, 'torch_threads_kept': torch.get_num_threads()
            == threads, 'has_flash_attn': attn.has_flash_attn,
            'has_xformers': attn.has_xformers, 'has_lower_right_sdpa': attn.has_lower_right_sdpa}


def synthetic(run: Run, folder: Path) -> dict:
    hf = synthetic_config(ARCH)
    if not (folder / 'config.json').is_file():
        gptq_files.write_synthetic(hf, folder)
    config = ModelConfig.from_hf(hf)
    spec = gptq.GptqSpec.from_hf(read_config(folder / 'config.json'))
    w, w_all = gptq.weight_bytes(config, spec)
    run.state.update(synthetic_dir=folder, w=w, w_all=w_all, config=config,
                     group_size=spec.group_size)
    disk = sum(f.stat().st_size for f in folder.glob('*.safetensors'))
    return {'dir': str(folder), 'group_size': spec.group_size, 'W': w, 'W_all': w_all,
            'safetensors_bytes': disk}


def quantise(run: Run, embedded: Path, folder: Path) -> dict:
    spec = gptq_files.quantize_hf_dir(embedded, folder)
    run.state.update(embedded_dir=embedded, embedded_gptq=folder)
    return {'source': str(embedded), 'dir': str(folder), 'group_size': spec.group_size}


def checks(run: Run) -> dict:
    folder, result = str(run.state['embedded_gptq']), {}
    engine = load(folder, backend='exllamav2', max_context=1024)
    for backend in ('exllamav2', 'exllamav2-q4', 'exllamav2-q8'):
        engine.renew(backend)
        generation = engine.generate(engine.encode(QUESTION), 48)
        list(generation)
        result[f'reply_{backend}'] = generation.text
    engine.renew('exllamav2')
    reference = load(folder, backend='eager', device='cpu', dtype='float32', max_context=1024)
    ids = reference.tokenizer.encode(TEXT)
    ours, ref = engine.decoder.prompt_logits(ids).cpu(), reference.decoder.prompt_logits(ids)
    error = (ours - ref).norm(dim=-1) / ref.norm(dim=-1)
    head = engine.decoder.prompt_logits(ids[:24]).cpu()
    causal = ((ours[:24] - head).norm(dim=-1) / head.norm(dim=-1)).max().item()
    float_model = load(str(run.state['embedded_dir']), backend='eager', device='cuda',
                       dtype='bfloat16', max_context=1024)
    result.update(
        tokens=len(ids), prefill_rel_error_mean=round(error.mean().item(), 5),
        prefill_rel_error_max=round(error.max().item(), 5),
        top1_vs_dequantised=round(top1_agreement(ref, ours), 4),
        causal_prefix_rel_error=round(causal, 6),
        top1_vs_bf16=round(decoder_agreement(float_model.decoder, engine.decoder, ids), 4),
        dequantised_top1_vs_bf16=round(decoder_agreement(float_model.decoder,
                                                         reference.decoder, ids), 4))
    return result


def step_times(model, cache, position: int, count: int):
    """Time count steps at one position (the cache length is reset before each)."""
    ids = torch.tensor([[128000]], dtype=torch.long)
    times = []
    for _ in range(count):
        cache.current_seq_len = position
        torch.cuda.synchronize()
        start = time.perf_counter()
        logits = model.forward(ids, cache)
        int(torch.argmax(logits[0, -1]))
        times.append((time.perf_counter() - start) * 1e3)
    return times


def stock(run: Run, contexts, caches) -> dict:
    config, w, w_all = run.state['config'], run.state['w'], run.state['w_all']
    engine = load(str(run.state['synthetic_dir']), backend='exllamav2',
                  max_context=max(contexts) + 8)
    run.state['exl_engine'] = engine
    decoder = engine.decoder
    # Its per-layer graphs are captured at the 205th one-token call: time the steps before.
    before = step_times(decoder.model, decoder.cache, contexts[0] - 1, MEASURED)
    step_times(decoder.model, decoder.cache, contexts[0] - 1, WARM_STEPS - MEASURED)
    result = {'before_graphs': {'ctx': contexts[0], 'steps': MEASURED,
                                'step_ms': median_ms(before)}, 'cells': []}
    for cache in caches:
        decoder = engine.renew('exllamav2' if cache == 'fp16' else f'exllamav2-{cache}')
        for ctx in contexts:
            step_times(decoder.model, decoder.cache, ctx - 1, 5)
            measured = sorted(step_times(decoder.model, decoder.cache, ctx - 1, MEASURED))
            kv = kv_bytes(config, ctx, KV_BYTES_PER_ELEMENT[cache])
            cell = {'cache': cache, 'ctx': ctx, 'step_ms': median_ms(measured),
                    'step_ms_p10': round(measured[MEASURED // 10], 4),
                    'step_ms_p90': round(measured[MEASURED * 9 // 10], 4), 'kv_bytes': int(kv)}
            cell.update(floor_fields(w, w_all, kv, cell['step_ms'], run.state['b_peak_gbs']))
            result['cells'].append(cell)
            print(f'[exl2]   {cache} KV, ctx {ctx}: {cell["step_ms"]} ms/step, '
                  f'R_floor {cell["R_floor"]}', flush=True)
    engine.renew('exllamav2')
    return result


def profile(run: Run) -> dict:
    from torch.profiler import profile as torch_profile, ProfilerActivity
    decoder = run.state['exl_engine'].decoder
    step_times(decoder.model, decoder.cache, 2047, 10)   # its graphs are in since phase stock
    steps = 3
    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step_times(decoder.model, decoder.cache, 2047, steps)
    host, kernels, aten = {}, {}, 0
    busy_us = 0.0
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            kernels[event.name] = kernels.get(event.name, 0) + 1
            busy_us += event.time_range.elapsed_us()
        elif event.name.startswith(('cuda', 'cu')):
            host[event.name] = host.get(event.name, 0) + 1
        elif event.name.startswith('aten::'):
            aten += 1
    per_step = {name: round(count / steps, 2) for name, count in sorted(host.items())}
    top = sorted(kernels.items(), key=lambda kv: -kv[1])[:25]
    return {'ctx': 2048, 'runtime_calls_per_step': per_step,
            'gpu_kernels_per_step': round(sum(kernels.values()) / steps, 2),
            'aten_ops_per_step': round(aten / steps, 2),
            'gpu_busy_ms_per_step': round(busy_us / steps / 1e3, 4),
            'kernels': {name[:120]: round(count / steps, 2) for name, count in top},
            'table': prof.key_averages().table(sort_by='self_cpu_time_total', row_limit=30)}


def gemv(run: Run) -> dict:
    from exllamav2.ext import exllamav2_ext as ext_c
    from exllamav2.linear import ExLlamaV2Linear
    model = run.state['exl_engine'].decoder.model
    linears = [m for m in model.modules_dict.values()
               if isinstance(m, ExLlamaV2Linear) and m.q_handle is not None]
    head = model.modules_dict['lm_head'].linear.weight                       # [V, H] fp16
    device = head.device
    inputs = [torch.randn(1, m.in_features, dtype=torch.half, device=device) * 0.1
              for m in linears]
    outputs = [torch.empty(1, m.out_features, dtype=torch.half, device=device)
               for m in linears]
    x = torch.randn(1, head.shape[1], dtype=torch.half, device=device)
    logits = torch.empty(1, head.shape[0], dtype=torch.half, device=device)

    def chain():
        for m, a, c in zip(linears, inputs, outputs):
            ext_c.gemm_half_q_half(a, m.q_handle, c, False)
        torch.matmul(x, head.T, out=logits)

    def timed(fn, reps):
        times = []
        for _ in range(reps):
            torch.cuda.synchronize()
            start = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - start) * 1e3)
        return median_ms(times)

    eager_ms = timed(chain, 20)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        chain()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        chain()
    graph_ms = timed(graph.replay, 50)
    group = run.state['group_size']
    read = head.numel() * 2 + sum(
        t.nbytes for m in linears
        for t in gptq.quantized_specs('', m.out_features, m.in_features, group))
    return {'linears': len(linears), 'bytes_read': read, 'eager_ms': eager_ms,
            'graph_ms': graph_ms, 'graph_TBps': round(read / graph_ms / 1e9, 3),
            'graph_R': round(t_floor_s(read, 0, run.state['b_peak_gbs']) * 1e3 / graph_ms, 4)}


def bf16(run: Run, contexts) -> dict:
    config = ModelConfig.from_hf(synthetic_config(ARCH))
    w = weight_bytes_per_step(config, Dense(2))
    engine = load(f'synthetic:{ARCH}', backend='graphed', max_context=max(contexts) + 64)
    cells = []
    for ctx in contexts:
        prompt = torch.randint(0, config.vocab_size, (ctx - 1,)).tolist()
        engine.decoder.prefill(prompt, Sampling())
        times = []
        for index in range(5 + MEASURED):
            torch.cuda.synchronize()
            start = time.perf_counter()
            engine.decoder.step()
            if index >= 5:
                times.append((time.perf_counter() - start) * 1e3)
        step = median_ms(times)
        t_floor = t_floor_s(w, kv_bytes(config, ctx, 2), run.state['b_peak_gbs']) * 1e3
        cells.append({'ctx': ctx, 'step_ms': step, 't_floor_ms': round(t_floor, 4),
                      'R_floor': round(t_floor / step, 4)})
        print(f'[exl2]   bf16 graphed ctx {ctx}: {step} ms/step, R_floor {cells[-1]["R_floor"]}',
              flush=True)
    return {'W': w, 'backend': engine.info.backend, 'cells': cells}


def tests(run: Run, out: Path) -> dict:
    junit = out.with_suffix('.junit.xml')
    result = subprocess.run(
        [sys.executable, '-m', 'pytest', '-q', '-s', '-rA',
         'test/engine/decoders/test_exllamav2.py', f'--junitxml={junit}'],
        cwd=REPO, capture_output=True, text=True, timeout=1800)
    tail = (result.stdout + result.stderr).splitlines()[-60:]
    if result.returncode != 0:
        raise RuntimeError('GPU tests failed:\n' + '\n'.join(tail))
    return {'returncode': result.returncode, 'junit': str(junit), 'tail': tail}


def plot(run: Run, out: Path) -> dict:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    phases = run.record['phases']
    series = {}
    for cell in phases.get('stock', {}).get('cells', []):
        series.setdefault(f'exllamav2 GPTQ 4-bit ({cell["cache"]} KV)', []).append(cell)
    if phases.get('bf16', {}).get('cells'):
        series['ours, bf16, one CUDA graph'] = phases['bf16']['cells']
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for label, cells in series.items():
        left.plot([c['ctx'] for c in cells], [c['step_ms'] for c in cells], 'o-', label=label)
        right.plot([c['ctx'] for c in cells], [c['R_floor'] for c in cells], 'o-', label=label)
    left.set(xlabel='context (tokens)', ylabel='ms per step', yscale='log',
             title=f'{ARCH}, batch 1, H200')
    right.set(xlabel='context (tokens)', ylabel='R_floor = t_floor / t_step', ylim=(0, 1))
    left.legend(fontsize=8)
    path = out.with_suffix('.png')
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return {'png': str(path)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--out', type=Path, required=True, help='JSON results file')
    parser.add_argument('--embedded', type=Path,
                        help="the embedded model's converted float directory "
                             "(default: physinf_ros.engine.weights.resolve.resolve('embedded'))")
    parser.add_argument('--synthetic-dir', type=Path,
                        help='reuse (or write once into) this synthetic GPTQ directory')
    parser.add_argument('--contexts', type=int, nargs='+', default=[2048, 8192, 16384])
    parser.add_argument('--caches', nargs='+', default=['fp16'], choices=['fp16', 'q4', 'q8'])
    parser.add_argument('--bf16', action='store_true', help='also time our graphed bf16 step')
    parser.add_argument('--pytest', action='store_true', help='also run the GPU tests')
    parser.add_argument('--keep', action='store_true', help='keep the temporary model dirs')
    args = parser.parse_args(argv)
    # Read by torch's extension builder when exllamav2 is first imported (phase build).
    os.environ.setdefault('MAX_JOBS', '16')
    os.environ.setdefault('TORCH_CUDA_ARCH_LIST', '9.0')

    run = Run(args.out)
    run.record['environment'] = environment()
    # B_peak of every R_floor here: the GPU's entry in config/targets.yaml.
    run.state['b_peak_gbs'] = run.record['environment']['b_peak_gbs'] = detect(
        torch.device('cuda')).bandwidth_gbs
    scratch = Path(tempfile.mkdtemp(prefix='physinf-exl2-'))
    embedded = args.embedded
    if embedded is None:
        from physinf_ros.engine.weights.resolve import resolve
        embedded = resolve('embedded').path
    try:
        run.phase('build', build, run)
        run.phase('synthetic', synthetic, run, args.synthetic_dir or scratch / 'synthetic-8b')
        run.phase('quantise', quantise, run, embedded, scratch / 'embedded-gptq')
        run.phase('checks', checks, run)
        run.phase('stock', stock, run, args.contexts, args.caches)
        run.phase('profile', profile, run)
        run.phase('gemv', gemv, run)
        run.state.pop('exl_engine', None)
        torch.cuda.empty_cache()
        if args.bf16:
            run.phase('bf16', bf16, run, args.contexts)
        if args.pytest:
            run.phase('pytest', tests, run, args.out)
        run.phase('plot', plot, run, args.out)
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    failed = [name for name, entry in run.record['phases'].items() if not entry['ok']]
    print(f'[exl2] results in {args.out}; failed phases: {", ".join(failed) or "none"}')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
