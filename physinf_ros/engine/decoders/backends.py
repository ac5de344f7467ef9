"""
The backends, one record each: every fact about a backend is written here and read from here.

A record says which family the backend belongs to (backends of one family share loaded
weights, so a session may move between them without loading again), what it runs as where
there is no CUDA, which checkpoints it takes (float, gptq, exl2), whether `auto` may pick it,
how its family loads weights and how it makes a decoder on them, and which models its family
refuses (ours decodes the model_types of model/config.py's FAMILIES: llama, mistral, qwen2,
qwen3, smollm3, phi3, gemma3_text and gemma3's language model; `auto` runs any other on hf).
The transformers backends also take a software stack after a colon (`hf-graphed:sdpa-cudnn`,
`hf:bnb-nf4`; stacks.py).
`pick` resolves a request against the table; `Engine` (engine/loading.py) loads and renews
through it.
"""

from dataclasses import dataclass
from operator import attrgetter
from typing import Callable, FrozenSet, Optional, Tuple

import torch

from .stacks import Attention, missing, Quantization, STACK_HELP, STACKS
from ..base import Decoder, DecoderInfo, EngineError
from ..kernels.config import KernelConfig
from ..model import families
from ..model.config import ModelConfig
from ..weights.source import ModelSource

FLOAT = 'float'   # the checkpoint kind of unquantised weights; others are quant_method values
AUTO = 'auto'


@dataclass(frozen=True)
class Build:
    """What a backend needs to make a decoder besides the loaded weights."""

    info: DecoderInfo
    device: torch.device
    source: ModelSource
    log: Callable[[str], None]
    kernels: Optional[KernelConfig] = None   # our kernels' configuration (CUDA only)
    stack: Optional[object] = None   # the transformers backends' Attention or Quantization


def _load_native(backend: 'Backend', source: ModelSource, device: torch.device,
                 dtype: torch.dtype, max_context: int, log: Callable[[str], None], stack=None):
    try:
        config = ModelConfig.from_hf(source.hf_config)
        if source.synthetic:
            return families.synthetic_weights(config, device, dtype)
        # On CUDA the linears stay 4-bit for the kernels; a CPU runs the dequantised floats.
        return families.load_hf_dir(source.path, device, dtype, packed=device.type == 'cuda',
                                    hf=source.hf_config)
    except (ValueError, FileNotFoundError) as exc:
        hint = '' if source.quant_method else '; backend hf runs any transformers model'
        raise EngineError(f'backend {backend.name} cannot load {source.name}: {exc}{hint}'
                          ) from None


def _make_native(backend: 'Backend', weights, build: Build) -> Decoder:
    from .native import NativeDecoder
    return NativeDecoder(weights, build.info, build.device, graphed=backend.name == 'graphed',
                         log=build.log, kernel_config=build.kernels)


def _load_hf(backend: 'Backend', source: ModelSource, device: torch.device, dtype: torch.dtype,
             max_context: int, log: Callable[[str], None], stack=None):
    from .hf import load_hf_model
    model = load_hf_model(source, device, dtype)
    if isinstance(stack, Quantization):
        stack.quantize(model, dtype)
        log(f'weights quantised with {stack.summary}')
    return model


def _make_hf(backend: 'Backend', model, build: Build) -> Decoder:
    from .hf import HFDecoder, HFGraphedDecoder
    cls = HFGraphedDecoder if backend.name == 'hf-graphed' else HFDecoder
    return cls(model, build.info, build.device, build.stack)


def _load_exllama(backend: 'Backend', source: ModelSource, device: torch.device,
                  dtype: torch.dtype, max_context: int, log: Callable[[str], None], stack=None):
    from .exllama import load_model
    return load_model(source.path, device, max_context, log)


def _make_exllama(backend: 'Backend', model, build: Build) -> Decoder:
    from .exllama import ExLlamaV2Decoder
    return ExLlamaV2Decoder(model, build.info, build.device, backend.name,
                            build.source.hf_config)


@dataclass(frozen=True)
class Family:
    """Backends that share loaded weights: what they take and how they are built."""

    name: str
    checkpoints: FrozenSet[str]   # FLOAT and the quant_method values it runs
    load: Callable     # (backend, source, device, dtype, max_context, log) -> what it shares
    make: Callable     # (backend, shared, Build) -> Decoder
    shared: Callable   # decoder -> what it was made on, for a renew within the family
    needs_cuda: bool = False             # no CPU path at all
    dtype: Optional[torch.dtype] = None  # computes in this dtype whatever was asked
    stacks: bool = False                 # takes a software stack (stacks.py) after a colon
    # config.json -> why this family cannot run the model (None: it can); None: runs any
    refuses: Optional[Callable[[dict], Optional[str]]] = None


NATIVE = Family('native', frozenset({FLOAT, 'gptq'}), _load_native, _make_native,
                attrgetter('weights'), refuses=families.supported)
HF = Family('hf', frozenset({FLOAT}), _load_hf, _make_hf, attrgetter('model'), stacks=True)
EXLLAMA = Family('exllamav2', frozenset({'gptq', 'exl2'}), _load_exllama, _make_exllama,
                 attrgetter('model'), needs_cuda=True, dtype=torch.float16)


@dataclass(frozen=True)
class Backend:
    """One backend: its family, what it runs as without CUDA, whether auto may pick it."""

    name: str
    family: Family
    summary: str
    without_cuda: Optional[str] = None   # the backend it runs as on a CPU (None: itself)
    auto: bool = False   # auto picks the first such backend that takes the checkpoint

    def takes(self, quantization: Optional[str]) -> bool:
        return (quantization or FLOAT) in self.family.checkpoints

    def load(self, source: ModelSource, device: torch.device, dtype: torch.dtype,
             max_context: int, log: Callable[[str], None], stack=None):
        """Load what this backend's family shares: a model object or our Weights."""
        return self.family.load(self, source, device, dtype, max_context, log, stack)

    def make(self, shared, build: Build) -> Decoder:
        """Build a fresh decoder (cache, graphs) of this backend on loaded weights."""
        return self.family.make(self, shared, build)


TABLE = (
    Backend('hf', HF, 'transformers, the reference'),
    Backend('hf-graphed', HF, 'transformers, one CUDA graph per step', without_cuda='hf'),
    Backend('eager', NATIVE, 'our forward, op by op'),
    Backend('graphed', NATIVE, 'our whole step in one CUDA graph', without_cuda='eager',
            auto=True),
    Backend('exllamav2', EXLLAMA, 'GPTQ/EXL2 on exllamav2, fp16 KV cache', auto=True),
    Backend('exllamav2-q4', EXLLAMA, 'the same with a 4-bit KV cache'),
    Backend('exllamav2-q8', EXLLAMA, 'the same with an 8-bit KV cache'),
)
BY_NAME = {backend.name: backend for backend in TABLE}
# What a backend may be asked for: auto, then every backend by name (the transformers ones
# also as NAME:STACK).
BACKENDS = (AUTO,) + tuple(BY_NAME)
BACKEND_HELP = ('auto (the fastest here: graphed on CUDA, GPTQ on our 4-bit kernels; exllamav2 '
                'for EXL2; eager on a CPU; hf for a model_type our forward does not decode), '
                + ', '.join(f'{b.name} ({b.summary})' for b in TABLE)
                + '; hf and hf-graphed also as NAME:STACK, a stack being ' + STACK_HELP)


def split(name: str) -> Tuple[str, Optional[str]]:
    """Return (backend, stack name or None) of 'hf-graphed:sdpa-cudnn' or 'graphed'."""
    base, _, stack = name.partition(':')
    return base, stack or None


def check_name(name: str) -> Optional[str]:
    """Why name is not a backend one may ask for (NAME or NAME:STACK), or None."""
    base, stack = split(name)
    if base not in BACKENDS:
        return f'unknown backend {name!r}: choose one of {", ".join(BACKENDS)}'
    if stack is None:
        return None if ':' not in name else f'backend {name!r}: name a stack after the colon'
    if base == AUTO or not BY_NAME[base].family.stacks:
        takers = ', '.join(b.name for b in TABLE if b.family.stacks)
        return f'backend {name!r}: only {takers} take a stack'
    if stack not in STACKS:
        return f'unknown stack {stack!r} in {name!r}: choose one of {STACK_HELP}'
    return None


def stack_of(name: str) -> Optional[object]:
    """Return the Attention or Quantization record a backend name carries, or None."""
    stack = split(name)[1]
    return STACKS[stack] if stack else None


def record(name: str) -> Backend:
    """Return the backend record of a picked name ('hf-graphed:sdpa-cudnn': hf-graphed's)."""
    return BY_NAME[split(name)[0]]


def family(name: str) -> tuple:
    """Return the names of the backends that share loaded weights with backend name."""
    base = record(name)
    return tuple(b.name for b in TABLE if b.family is base.family)


def weights_key(name: str) -> Tuple[str, Optional[str]]:
    """
    Return what backend name's loaded weights are: its family and its quantisation stack.

    Two names with the same key share loaded weights, so a session may move between them
    (eager and graphed; hf, hf-graphed and their attention stacks) without loading again.
    """
    stack = stack_of(name)
    weights = None if stack is None or isinstance(stack, Attention) else stack.name
    return record(name).family.name, weights


def graph_of(name: str) -> Optional[str]:
    """Return the backend name runs as without CUDA when that differs (its eager forward)."""
    base, stack = split(name)
    eager = BY_NAME[base].without_cuda
    return eager if eager is None or stack is None else f'{eager}:{stack}'


def pick(backend: str, device: torch.device, quantization: Optional[str] = None,
         log: Callable[[str], None] = lambda _: None, hf_config: Optional[dict] = None) -> str:
    """
    Resolve 'auto' and fall back from graph backends where there is no CUDA.

    quantization is the checkpoint's quant_method ('gptq', 'exl2') or None for float weights.
    A stack that cannot run here (no CUDA, its package missing) is refused, before any load.
    hf_config (the model's config.json) lets `auto` pass over a family that refuses the model
    (one log line says why) and names why an explicit backend cannot run it.
    """
    wrong = check_name(backend)
    if wrong:
        raise EngineError(wrong)
    base, stack_name = split(backend)
    name = _pick(base, device, quantization, log, hf_config)
    if stack_name is None:
        return name
    stack = STACKS[stack_name]
    why = missing(stack, device)
    if why:
        raise EngineError(why)
    if isinstance(stack, Quantization) and quantization:
        raise EngineError(f'stack {stack_name} quantises float weights; this model is already a '
                          f'{quantization} checkpoint: drop :{stack_name} or load the float model')
    return f'{name}:{stack_name}'


def _pick(backend: str, device: torch.device, quantization: Optional[str],
          log: Callable[[str], None], hf_config: Optional[dict] = None) -> str:
    cuda = device.type == 'cuda'
    takers = [b for b in TABLE if b.takes(quantization)]
    if not takers:
        kinds = sorted({kind for b in TABLE for kind in b.family.checkpoints})
        raise EngineError(f'{quantization} checkpoints run on no backend here: backends take '
                          + ', '.join(kinds))
    if not cuda and all(b.family.needs_cuda for b in takers):
        raise EngineError(f'{quantization} checkpoints run only on backend '
                          f'{_auto(takers).name}, which needs a CUDA GPU (device is '
                          f'{device.type})')
    chosen = _auto(takers) if backend == AUTO else BY_NAME[backend]
    why = _refused(chosen, hf_config)
    if why and backend != AUTO:
        raise EngineError(f'backend {chosen.name} cannot run this model: {why}; backend hf runs '
                          'any transformers model')
    if why:
        others = [b for b in takers if not _refused(b, hf_config)
                  and (cuda or not b.family.needs_cuda)]
        if not others:
            raise EngineError(f'no backend here runs this {quantization or FLOAT} model: '
                              f'{chosen.name} cannot ({why})')
        fallback = next((b for b in others if b.auto), others[0])
        log(f'auto: our engine does not decode this model ({why}); running it on backend '
            f'{fallback.name}')
        chosen = fallback
    if backend == AUTO and chosen.without_cuda and not cuda:
        chosen = BY_NAME[chosen.without_cuda]   # auto on a CPU: the eager forward, no note
    if not chosen.takes(quantization):
        hint = ('this model has float weights: append :gptq to the model spec for a 4-bit copy'
                if quantization is None else f'run this {quantization} model with '
                + ', '.join(b.name for b in takers))
        kinds = ' and '.join(sorted(chosen.family.checkpoints))
        raise EngineError(f'backend {chosen.name} runs {kinds} checkpoints only; {hint}')
    if chosen.family is NATIVE and quantization and not cuda:
        log(f'{quantization} checkpoint on {device.type}: backend {chosen.name} runs it with '
            'its weights dequantised to float once at load (the 4-bit kernels need CUDA)')
    if chosen.without_cuda and not cuda:
        log(f'backend {chosen.name} needs CUDA graphs; on {device.type} it runs as '
            f'{chosen.without_cuda} (the same forward, launched op by op)')
        return chosen.without_cuda
    return chosen.name


def _refused(backend: Backend, hf_config: Optional[dict]) -> Optional[str]:
    refuses = backend.family.refuses
    return None if refuses is None or hf_config is None else refuses(hf_config)


def _auto(takers) -> Backend:
    return next(b for b in takers if b.auto)
