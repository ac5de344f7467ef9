"""
The backends, one record each: every fact about a backend is written here and read from here.

A record says which family the backend belongs to (backends of one family share loaded
weights, so a session may move between them without loading again), what it runs as where
there is no CUDA, which checkpoints it takes (float, gptq, exl2), whether `auto` may pick it,
how its family loads weights and how it makes a decoder on them. `pick` resolves a request
against the table; `Engine` (engine/__init__.py) loads and renews through it.
"""

from dataclasses import dataclass
from operator import attrgetter
from typing import Callable, FrozenSet, Optional, TYPE_CHECKING

import torch

from .base import Decoder, DecoderInfo, EngineError
from .models import ModelSource

if TYPE_CHECKING:   # kernels imports triton: only where our kernels run
    from .kernels import KernelConfig

FLOAT = 'float'   # the checkpoint kind of unquantised weights; others are quant_method values
AUTO = 'auto'


@dataclass(frozen=True)
class Build:
    """What a backend needs to make a decoder besides the loaded weights."""

    info: DecoderInfo
    device: torch.device
    source: ModelSource
    log: Callable[[str], None]
    kernels: Optional['KernelConfig'] = None   # our kernels' configuration (CUDA only)


def _load_native(backend: 'Backend', source: ModelSource, device: torch.device,
                 dtype: torch.dtype, max_context: int, log: Callable[[str], None]):
    from . import llama
    try:
        config = llama.ModelConfig.from_hf(source.hf_config)
        if source.synthetic:
            return llama.from_state_dict(config, llama.synthetic_state_dict(
                config, device, dtype), device, dtype)
        # On CUDA the linears stay 4-bit for the kernels; a CPU runs the dequantised floats.
        return llama.load_hf_dir(source.path, device, dtype, packed=device.type == 'cuda',
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
             max_context: int, log: Callable[[str], None]):
    from .hf import load_hf_model
    return load_hf_model(source, device, dtype)


def _make_hf(backend: 'Backend', model, build: Build) -> Decoder:
    from .hf import HFDecoder, HFGraphedDecoder
    cls = HFGraphedDecoder if backend.name == 'hf-graphed' else HFDecoder
    return cls(model, build.info, build.device)


def _load_exllama(backend: 'Backend', source: ModelSource, device: torch.device,
                  dtype: torch.dtype, max_context: int, log: Callable[[str], None]):
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


NATIVE = Family('native', frozenset({FLOAT, 'gptq'}), _load_native, _make_native,
                attrgetter('weights'))
HF = Family('hf', frozenset({FLOAT}), _load_hf, _make_hf, attrgetter('model'))
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
             max_context: int, log: Callable[[str], None]):
        """Load what this backend's family shares: a model object or our Weights."""
        return self.family.load(self, source, device, dtype, max_context, log)

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
# What a backend may be asked for: auto, then every backend by name.
BACKENDS = (AUTO,) + tuple(BY_NAME)
BACKEND_HELP = ('auto (the fastest here: graphed on CUDA, GPTQ on our 4-bit kernels; exllamav2 '
                'for EXL2; eager on a CPU), '
                + ', '.join(f'{b.name} ({b.summary})' for b in TABLE))


def family(name: str) -> tuple:
    """Return the names of the backends that share loaded weights with backend name."""
    return tuple(b.name for b in TABLE if b.family is BY_NAME[name].family)


def graph_of(name: str) -> Optional[str]:
    """Return the backend name runs as without CUDA when that differs (its eager forward)."""
    return BY_NAME[name].without_cuda


def pick(backend: str, device: torch.device, quantization: Optional[str] = None,
         log: Callable[[str], None] = lambda _: None) -> str:
    """
    Resolve 'auto' and fall back from graph backends where there is no CUDA.

    quantization is the checkpoint's quant_method ('gptq', 'exl2') or None for float weights.
    """
    if backend not in BACKENDS:
        raise EngineError(f'unknown backend {backend!r}: choose one of {", ".join(BACKENDS)}')
    cuda = device.type == 'cuda'
    takers = [b for b in TABLE if b.takes(quantization)]
    if not takers:
        raise EngineError(f'{quantization} checkpoints run on no backend here: backends take '
                          + ', '.join(sorted({kind for b in TABLE for kind in b.checkpoints})))
    if not cuda and all(b.family.needs_cuda for b in takers):
        raise EngineError(f'{quantization} checkpoints run only on backend '
                          f'{_auto(takers).name}, which needs a CUDA GPU (device is '
                          f'{device.type})')
    chosen = _auto(takers) if backend == AUTO else BY_NAME[backend]
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


def _auto(takers) -> Backend:
    return next(b for b in takers if b.auto)
