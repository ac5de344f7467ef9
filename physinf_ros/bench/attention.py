"""
physinf-attention: decode attention of one layer, microseconds per call, for each backend.

The seed paper compares attention implementations per layer at batch 1 (SDPA, FlashAttention-2
and -3, FlashInfer on an H100 at ctx 2048). This times the same call in isolation, for the
engine's attention stacks (engine/decoders/stacks.py), FlashInfer and our own split-K kernel: one
query token against a full KV cache of ctx tokens in Llama-3.1-8B's GQA shape, bf16. Every
backend's output is first checked against float32 attention on the same values; on CUDA, many
calls are captured in one CUDA graph so that launch cost stays out of the figure.

    physinf-attention --contexts 2048,4096,8192,16384 --out attention.json
"""

import argparse
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from functools import lru_cache, partial
from importlib import import_module
from importlib.util import find_spec
import json
import math
from pathlib import Path
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F

from .matrix import ATTENTION_SCHEMA
from .results import machine_facts
from ..engine.base import EngineError
from ..engine.decoders import stacks
from ..engine.device import device_label, dtype_name, pick_device
from ..engine.kernels.config import KernelConfig
from ..engine.model.config import ModelConfig
from ..engine.model.llama import rope_tables
from ..engine.weights.source import synthetic_config
from ..measurement.stats import percentile

SCHEMA_VERSION = 1
MODEL = 'llama-3.1-8b'   # the shape's source: config/models.yaml, as synthetic:llama-3.1-8b
DTYPE = torch.bfloat16
WARMUP_REPLAYS = 2
SDPA_GQA = torch.__version__ >= '2.5'   # SDPA's enable_gqa arrived in torch 2.5
# Inputs are bf16 values, so the float32 reference sees exactly what the kernels see; what is
# left is the kernels' own rounding. bf16 keeps 8 significant bits (2^-8 relative per rounding):
# fused kernels round the probabilities and the output, off by well under 1% of the largest
# output element; eager also rounds the raw scores (|q.k| up to ~40 here, ulp 0.25), which
# reached 2% at ctx 8192 over seeds. 2^-4 of the largest reference element leaves a 3x margin,
# while a wrong kernel (another head's keys, a wrong scale, a wrong rotation) is off by about
# the output's own size.
TOLERANCE = 2 ** -4
METHOD = (
    'Decode attention of one layer at batch 1: one query token against a KV cache of ctx '
    'tokens, random bf16 inputs (seeded). Each backend is first checked on layer 0 against '
    'float32 attention on the same values (max abs error); one whose error exceeds tolerance '
    'times the largest reference element is recorded as wrong and not timed. On CUDA, '
    'calls_per_graph calls are captured in one CUDA graph (host launch cost excluded), the '
    'graph replayed untimed, then replayed `replays` times between CUDA events; each replay '
    'gives one sample, its time / calls_per_graph; p50, p10 and p90 are over replays. '
    'Consecutive calls cycle over one KV cache per layer of the model, as a decode step reads '
    'them, so the cache comes from memory, not from L2. A call is the attention op alone '
    '(RoPE, the cache update and layout transposes are outside it), except physinf, whose call '
    'also rotates q and k and writes the new k and v, as our decode step runs it. On CPU the '
    'same calls run without graphs, timed with time.perf_counter: a check of the logic, not a '
    'benchmark.')


@dataclass
class Inputs:
    """One context's random inputs, the same for every backend, and their float32 answer."""

    config: ModelConfig
    ctx: int
    q: torch.Tensor               # [1, Hq, 1, D]
    k: List[torch.Tensor]         # per layer [1, Hkv, ctx, D]
    v: List[torch.Tensor]
    qkv: torch.Tensor             # physinf's input [(Hq + 2 Hkv) D], float32 holding bf16 values
    expected: torch.Tensor        # float32 [Hq, D]: layer 0's attention

    @property
    def device(self) -> torch.device:
        return self.q.device

    @property
    def group(self) -> int:
        return self.config.num_heads // self.config.num_kv_heads


@dataclass
class Prepared:
    """A backend made ready for one context: call(layer) runs one layer's attention."""

    call: Callable[[int], torch.Tensor]
    expected: torch.Tensor        # float32 [Hq, D], what call(0) must return
    facts: Dict[str, object]      # what one call runs, for the record


@dataclass(frozen=True)
class Backend:
    """An attention implementation timed here, and what it needs to run."""

    name: str
    prepare: Callable[[Inputs], Prepared]
    stack: Optional[stacks.Attention] = None   # the engine's attention stack of this name
    package: Optional[str] = None   # import name it needs (a backend that is no stack)
    install: str = ''
    cuda_reason: str = ''           # why it runs on CUDA only; '' if the CPU runs it too

    def missing(self, device: torch.device) -> Optional[str]:
        """Return why this backend cannot run here, or None."""
        if self.stack is not None:
            return stacks.missing(self.stack, device)
        if self.cuda_reason and device.type != 'cuda':
            return f'{self.name} needs CUDA ({self.cuda_reason})'
        if self.package and find_spec(self.package) is None:
            return f'{self.name} needs the {self.package} package: {self.install}'
        return None

    def context(self):
        """Return the context its calls run in (an SDPA kernel forced, or none)."""
        return self.stack.context() if self.stack is not None else nullcontext()


class WrongResult(Exception):
    """A backend's output is further from the float32 reference than the tolerance."""

    def __init__(self, max_abs_err: float, tolerance: float):
        super().__init__(f'wrong result: max abs error {max_abs_err:.3g} > tolerance '
                         f'{tolerance:.3g}')
        self.max_abs_err, self.tolerance = max_abs_err, tolerance


def model_config() -> ModelConfig:
    """Return Llama-3.1-8B's shape (heads, KV heads, head_dim, layers, RoPE) from models.yaml."""
    return ModelConfig.from_hf(synthetic_config(MODEL))


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Return float32 GQA attention [Hq, D] of q [1, Hq, 1, D] over k, v [1, Hkv, T, D]."""
    kv_heads, dim = k.shape[1], k.shape[3]
    queries = q[0, :, 0].float().view(kv_heads, -1, dim)   # query head h reads kv head h // group
    scores = queries @ k[0].float().transpose(1, 2) * dim ** -0.5
    return (scores.softmax(dim=-1) @ v[0].float()).view(-1, dim)


def make_inputs(config: ModelConfig, ctx: int, device: torch.device, seed: int) -> Inputs:
    """Draw q, one KV cache per layer and physinf's qkv vector, all bf16 values."""
    generator = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape):
        return torch.randn(shape, generator=generator, device=device, dtype=DTYPE)

    heads, kv_heads, dim = config.num_heads, config.num_kv_heads, config.head_dim
    q = randn(1, heads, 1, dim)
    k = [randn(1, kv_heads, ctx, dim) for _ in range(config.num_layers)]
    v = [randn(1, kv_heads, ctx, dim) for _ in range(config.num_layers)]
    qkv = randn((heads + 2 * kv_heads) * dim).float()
    return Inputs(config, ctx, q, k, v, qkv, reference_attention(q, k[0], v[0]))


def _sdpa(inputs: Inputs, native_gqa: Optional[bool] = None) -> Prepared:
    if SDPA_GQA if native_gqa is None else native_gqa:
        def call(layer):
            return F.scaled_dot_product_attention(inputs.q, inputs.k[layer], inputs.v[layer],
                                                  enable_gqa=True)
        gqa = 'enable_gqa=True'
    else:
        from transformers.models.llama.modeling_llama import repeat_kv

        def call(layer):
            return F.scaled_dot_product_attention(inputs.q,
                                                  repeat_kv(inputs.k[layer], inputs.group),
                                                  repeat_kv(inputs.v[layer], inputs.group))
        gqa = 'KV heads repeated (repeat_kv) first: no enable_gqa here'
    return Prepared(call, inputs.expected, {
        'call': 'torch.nn.functional.scaled_dot_product_attention', 'gqa': gqa})


def _eager(inputs: Inputs) -> Prepared:
    # transformers' eager_attention_forward (modeling_llama): KV heads repeated, scores in bf16,
    # softmax in float32 then back to bf16, then the values.
    from transformers.models.llama.modeling_llama import repeat_kv
    q, scale = inputs.q, inputs.config.head_dim ** -0.5

    def call(layer):
        keys = repeat_kv(inputs.k[layer], inputs.group)
        values = repeat_kv(inputs.v[layer], inputs.group)
        scores = torch.matmul(q, keys.transpose(2, 3)) * scale
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        return torch.matmul(probs, values)
    return Prepared(call, inputs.expected, {
        'call': "transformers' eager attention: repeat_kv, matmul, float32 softmax, matmul"})


@lru_cache(maxsize=None)
def compiled_flex_attention() -> Callable:
    """Return flex_attention compiled once per process, as transformers compiles it."""
    from torch.nn.attention.flex_attention import flex_attention
    return torch.compile(flex_attention)


def _flex(inputs: Inputs) -> Prepared:
    flex = compiled_flex_attention()

    def call(layer):
        return flex(inputs.q, inputs.k[layer], inputs.v[layer], enable_gqa=True)
    return Prepared(call, inputs.expected, {
        'call': 'torch.compile(flex_attention), enable_gqa=True, no mask; compiled once per '
                'process, as transformers does (shapes turn dynamic from the second context)'})


def _flash_attn(module: str) -> Callable[[Inputs], Prepared]:
    def prepare(inputs: Inputs) -> Prepared:
        flash_attn_with_kvcache = import_module(module).flash_attn_with_kvcache
        # Its layouts: q [1, 1, Hq, D], caches [1, ctx, Hkv, D] (copied once, outside the time).
        q = inputs.q.transpose(1, 2).contiguous()
        k = [cache.transpose(1, 2).contiguous() for cache in inputs.k]
        v = [cache.transpose(1, 2).contiguous() for cache in inputs.v]
        lengths = torch.full((1,), inputs.ctx, dtype=torch.int32, device=inputs.device)

        def call(layer):
            return flash_attn_with_kvcache(q, k[layer], v[layer], cache_seqlens=lengths)
        return Prepared(call, inputs.expected, {
            'call': f'{module}.flash_attn_with_kvcache, caches [1, ctx, Hkv, D]'})
    return prepare


def _flashinfer(inputs: Inputs) -> Prepared:
    import flashinfer
    q = inputs.q.view(inputs.config.num_heads, inputs.config.head_dim)

    def call(layer):
        return flashinfer.single_decode_with_kv_cache(q, inputs.k[layer][0], inputs.v[layer][0],
                                                      kv_layout='HND')
    return Prepared(call, inputs.expected, {
        'call': "flashinfer.single_decode_with_kv_cache, kv_layout 'HND', defaults"})


def physinf_kernel(inputs: Inputs, config: KernelConfig) -> Prepared:
    """
    Prepare our attention as the engine's decode step calls it: KernelOps.rope_attention.

    One call launches the split kernel (RoPE of q and of the new k, the new k and v stored at
    pos = ctx - 1, split-K attention over 0..pos) and the reduce kernel. Its input is the QKV
    GEMV's output, unrotated, so the float32 reference is ops_torch.rope_attention (the kernels'
    reference: same rotation, same cache write) on float32 copies of layer 0's cache.
    """
    from ..engine.kernels import ops_torch
    from ..engine.kernels.ops_triton import KernelOps
    model = inputs.config
    ops = KernelOps(config)
    pos = torch.tensor([inputs.ctx - 1], dtype=torch.int32, device=inputs.device)
    cos, sin = rope_tables(model, inputs.ctx, inputs.device)
    # Its own caches [Hkv, ctx, D]: each call writes the new token into them.
    k = [cache[0].clone() for cache in inputs.k]
    v = [cache[0].clone() for cache in inputs.v]
    expected = ops_torch.rope_attention(inputs.qkv, pos, cos, sin, inputs.k[0][0].float(),
                                        inputs.v[0][0].float(), model.num_heads)

    def call(layer):
        return ops.rope_attention(inputs.qkv, pos, cos, sin, k[layer], v[layer], model.num_heads)
    return Prepared(call, expected.view(model.num_heads, model.head_dim), {
        'call': 'KernelOps.rope_attention as the decode step calls it: split kernel (RoPE of q '
                'and k, the new k and v written at ctx - 1, split-K attention) + reduce kernel',
        'kernel_attention': asdict(config.attention_for(model.num_kv_heads, model.head_dim))})


def _physinf(inputs: Inputs) -> Prepared:
    return physinf_kernel(inputs, KernelConfig.for_device(inputs.device))


_BY_IMPLEMENTATION = {'sdpa': _sdpa, 'eager': _eager, 'flex_attention': _flex,
                      'flash_attention_2': _flash_attn('flash_attn'),
                      'flash_attention_3': _flash_attn('flash_attn_interface')}
# torch's memory-efficient SDPA kernel takes no enable_gqa ("No available kernel"): its KV heads
# are repeated first, as transformers' SDPA attention does wherever enable_gqa does not apply.
NO_NATIVE_GQA = ('sdpa-efficient',)
BACKENDS = (tuple(Backend(a.name, partial(_sdpa, native_gqa=False)
                          if a.name in NO_NATIVE_GQA else _BY_IMPLEMENTATION[a.implementation], a)
                  for a in stacks.ATTENTIONS)
            + (Backend('flashinfer', _flashinfer, package='flashinfer',
                       install='pip install flashinfer-python', cuda_reason='CUDA-only kernels'),
               Backend('physinf', _physinf, cuda_reason='Triton kernels')))
BACKEND_NAMES = tuple(b.name for b in BACKENDS)


def _time_cpu(replay: Callable[[], None], replays: int) -> List[float]:
    for _ in range(WARMUP_REPLAYS):
        replay()
    seconds = []
    for _ in range(replays):
        start = time.perf_counter()
        replay()
        seconds.append(time.perf_counter() - start)
    return seconds


def captured_graph(replay: Callable[[], None]) -> torch.cuda.CUDAGraph:
    """Run replay on a side stream (compiles, settles the allocator), then capture it."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(WARMUP_REPLAYS):
            replay()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            replay()
    except RuntimeError as exc:
        raise RuntimeError(f'CUDA graph capture failed: {exc}') from exc
    return graph


def _time_cuda_graph(replay: Callable[[], None], replays: int) -> List[float]:
    # Capture, then replay back to back between events.
    graph = captured_graph(replay)
    for _ in range(WARMUP_REPLAYS):
        graph.replay()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(replays)]
    for start, end in events:
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) / 1000 for start, end in events]


@torch.inference_mode()
def measure_cell(backend: Backend, inputs: Inputs, calls: int, replays: int) -> Dict[str, object]:
    """Check one backend at one context against float32, then time it; raise WrongResult."""
    with backend.context():
        prepared = backend.prepare(inputs)
        expected = prepared.expected
        max_abs_err = (prepared.call(0).float().reshape(expected.shape) - expected).abs().max()
        tolerance = TOLERANCE * expected.abs().max().item()
        if not max_abs_err.item() <= tolerance:   # NaN is wrong too
            raise WrongResult(max_abs_err.item(), tolerance)
        layers = len(inputs.k)

        def replay():
            for i in range(calls):
                prepared.call(i % layers)
        graphed = inputs.device.type == 'cuda'
        seconds = (_time_cuda_graph if graphed else _time_cpu)(replay, replays)
    us_per_layer = [s / calls * 1e6 for s in seconds]
    return {'backend': backend.name, 'ctx': inputs.ctx,
            'us_per_layer_p50': percentile(us_per_layer, 50),
            'us_per_layer_p10': percentile(us_per_layer, 10),
            'us_per_layer_p90': percentile(us_per_layer, 90),
            'replays': replays, 'calls_per_graph': calls, 'graphed': graphed,
            'max_abs_err': max_abs_err.item(), 'tolerance': tolerance,
            'us_per_layer': us_per_layer, **prepared.facts}


def _reason(exc: Exception) -> str:
    # One line for a table cell: compiler errors run to pages.
    return ' '.join(f'{type(exc).__name__}: {exc}'.split())[:400]


@dataclass
class Run:
    """What one benchmark run measured, and what it could not."""

    cells: List[Dict[str, object]] = field(default_factory=list)
    unavailable: List[Dict[str, object]] = field(default_factory=list)


def measure(backends: Sequence[Backend], contexts: Sequence[int], calls: int, replays: int,
            device: torch.device, seed: int = 0,
            log: Callable[[str], None] = lambda _: None) -> Run:
    """Measure every backend that can run here at every context; record why the others not."""
    run = Run()
    runnable = []
    for backend in backends:
        reason = backend.missing(device)
        if reason is None:
            runnable.append(backend)
        else:
            run.unavailable.append({'backend': backend.name, 'reason': reason})
    config = model_config()
    for ctx in contexts:
        inputs = make_inputs(config, ctx, device, seed)
        for backend in runnable:
            try:
                cell = measure_cell(backend, inputs, calls, replays)
            except WrongResult as exc:
                error = exc.max_abs_err if math.isfinite(exc.max_abs_err) else None  # JSON
                run.unavailable.append({'backend': backend.name, 'ctx': ctx, 'reason': str(exc),
                                        'max_abs_err': error, 'tolerance': exc.tolerance})
                log(f'{backend.name} ctx {ctx}: {exc}')
                continue
            except Exception as exc:  # noqa: B902 - recorded with its reason; the others go on
                run.unavailable.append({'backend': backend.name, 'ctx': ctx,
                                        'reason': _reason(exc)})
                log(f'{backend.name} ctx {ctx}: {_reason(exc)}')
                continue
            run.cells.append(cell)
            log(f'{backend.name} ctx {ctx}: {cell["us_per_layer_p50"]:.2f} us per layer')
        del inputs
        if device.type == 'cuda':
            torch.cuda.empty_cache()
    return run


def document(run: Run, contexts: Sequence[int], calls: int, replays: int,
             device: torch.device, seed: int) -> Dict[str, object]:
    """Assemble the versioned results document."""
    config = model_config()
    return {
        'schema': ATTENTION_SCHEMA, 'schema_version': SCHEMA_VERSION,
        'created_utc': datetime.now(timezone.utc).isoformat(timespec='seconds'),
        'device': device_label(device), 'graphed': device.type == 'cuda',
        'machine': machine_facts(device),
        'shape': {'model': MODEL, 'batch': 1, 'query_tokens': 1,
                  'num_heads': config.num_heads, 'num_kv_heads': config.num_kv_heads,
                  'head_dim': config.head_dim, 'layers': config.num_layers,
                  'dtype': dtype_name(DTYPE)},
        'method': METHOD,
        'settings': {'contexts': list(contexts), 'calls_per_graph': calls, 'replays': replays,
                     'warmup_replays': WARMUP_REPLAYS, 'seed': seed,
                     'tolerance_relative': TOLERANCE},
        'cells': run.cells, 'unavailable': run.unavailable}


def table(doc: Dict[str, object]) -> str:
    """Return a short fixed-width summary: us per layer call by backend and context."""
    timing = 'CUDA graphs, CUDA events' if doc['graphed'] else 'no graphs, time.perf_counter'
    lines = [f'decode attention per layer, {doc["device"]} ({timing})',
             f'{"backend":<18} {"ctx":>6} {"us p50":>10} {"[p10, p90]":>22} {"max abs err":>12}']
    for c in doc['cells']:
        spread = f'[{c["us_per_layer_p10"]:.2f}, {c["us_per_layer_p90"]:.2f}]'
        lines.append(f'{c["backend"]:<18} {c["ctx"]:>6} {c["us_per_layer_p50"]:>10.2f} '
                     f'{spread:>22} {c["max_abs_err"]:>12.2e}')
    for entry in doc['unavailable']:
        at = f' at ctx {entry["ctx"]}' if 'ctx' in entry else ''
        lines.append(f'{entry["backend"]:<18} not measured{at}: {entry["reason"]}')
    return '\n'.join(lines)


def _contexts(text: str) -> List[int]:
    try:
        contexts = [int(part) for part in text.split(',')]
    except ValueError:
        contexts = []
    if not contexts or min(contexts) < 1:
        raise argparse.ArgumentTypeError(f'{text!r} is not a comma-separated list of positive '
                                         'context lengths')
    return contexts


def _backends(text: str) -> List[Backend]:
    names = [name.strip() for name in text.split(',')]
    unknown = [name for name in names if name not in BACKEND_NAMES]
    if unknown:
        raise argparse.ArgumentTypeError(f'unknown backend {", ".join(unknown)}: choose from '
                                         + ', '.join(BACKEND_NAMES))
    return [b for b in BACKENDS if b.name in names]


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f'{text} is not a positive count')
    return value


def attention_parser() -> argparse.ArgumentParser:
    """Return the command line parser of physinf-attention."""
    parser = argparse.ArgumentParser(
        prog='physinf-attention',
        description="Decode attention of one layer (batch 1, Llama-3.1-8B's GQA shape, bf16) "
                    'in microseconds per call, for each backend that can run here, each '
                    'checked against float32 first; the others are recorded with the reason.')
    parser.add_argument('--contexts', type=_contexts, default=[2048, 4096, 8192, 16384],
                        help='comma-separated context lengths (default: 2048,4096,8192,16384)')
    parser.add_argument('--backends', type=_backends, default=list(BACKENDS),
                        help='comma-separated, of ' + ', '.join(BACKEND_NAMES)
                        + ' (default: all)')
    parser.add_argument('--calls', type=_positive, default=100,
                        help='calls captured in one CUDA graph (on CPU: per timed run)')
    parser.add_argument('--replays', type=_positive, default=20,
                        help='timed replays of the graph; percentiles are over them')
    parser.add_argument('--device', default='auto', help='auto, cpu, cuda or cuda:N')
    parser.add_argument('--seed', type=int, default=0, help='seed of the random inputs')
    parser.add_argument('--out', type=Path, help='write the results JSON here')
    return parser


def main(argv=None) -> int:
    """Run physinf-attention: measure, print the table, write the JSON."""
    cli = attention_parser()
    args = cli.parse_args(argv)
    try:
        device = pick_device(args.device)
    except EngineError as exc:
        cli.error(str(exc))
    if device.type == 'cuda' and device.index is not None:
        torch.cuda.set_device(device)   # streams, graphs and events use the current device

    def log(message):
        print(f'[physinf] {message}', file=sys.stderr, flush=True)
    run = measure(args.backends, args.contexts, args.calls, args.replays, device, args.seed, log)
    doc = document(run, args.contexts, args.calls, args.replays, device, args.seed)
    print(table(doc))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=1, allow_nan=False) + '\n')
        print(f'wrote {args.out}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
