"""ROS-free decoding engine: model loading, backends, sampling and the generation loop."""

from dataclasses import dataclass, replace
import gc
import time
from typing import Callable, List, Optional, Sequence, Tuple

import torch

from .base import ContextFull, Decoder, DecoderInfo, EngineError, Sampling
from .device import device_label, dtype_name, pick_device, pick_dtype
from .generate import Generation
from .models import EMBEDDED, ModelSource, quant_method, resolve, stop_token_ids
from .text import encode_prompt, encode_text, encode_truncated, load_tokenizer

# hf: transformers, eager. hf-graphed: transformers + StaticCache + one CUDA graph per step.
# eager: our forward op by op. graphed: our whole step in one CUDA graph.
# eager and graphed run GPTQ checkpoints with 4-bit kernels on CUDA (dequantised on a CPU).
# exllamav2[-q4|-q8]: GPTQ/EXL2 checkpoints on exllamav2, fp16 (or 4-/8-bit) KV cache.
# auto: the fastest here (graphed; exllamav2 for EXL2 checkpoints).
EXLLAMA = ('exllamav2', 'exllamav2-q4', 'exllamav2-q8')
BACKENDS = ('auto', 'hf', 'hf-graphed', 'eager', 'graphed') + EXLLAMA
GRAPHED = {'graphed': 'eager', 'hf-graphed': 'hf'}   # what each falls back to without CUDA
# Backends that share loaded weights.
FAMILIES = ({'eager', 'graphed'}, {'hf', 'hf-graphed'}, set(EXLLAMA))

__all__ = ['BACKENDS', 'ContextFull', 'Decoder', 'DecoderInfo', 'EMBEDDED', 'Engine',
           'EngineError', 'Generation', 'Sampling', 'load']


@dataclass
class Engine:
    """A loaded model: the decoder, its tokenizer and where it came from."""

    decoder: Decoder
    tokenizer: object
    stop_ids: frozenset
    source: ModelSource
    load_s: float

    @property
    def info(self) -> DecoderInfo:
        return self.decoder.info

    def encode(self, text: str, use_chat_template: bool = True,
               system_prompt: str = '') -> List[int]:
        self._need_tokenizer()
        return encode_prompt(self.tokenizer, text, use_chat_template, system_prompt)

    def encode_truncated(self, text: str, limit: int, use_chat_template: bool = True,
                         system_prompt: str = '') -> Tuple[List[int], int]:
        """Encode, dropping the start of text so the prompt takes at most limit tokens."""
        self._need_tokenizer()
        return encode_truncated(self.tokenizer, text, limit, use_chat_template, system_prompt)

    def system_tokens(self, system_prompt: str) -> int:
        """Tokens the system prompt's text takes in every prompt (0 when it is empty)."""
        self._need_tokenizer()
        return len(encode_text(self.tokenizer, system_prompt)) if system_prompt else 0

    def _need_tokenizer(self) -> None:
        if self.tokenizer is None:
            raise EngineError(f'{self.source.name} has no tokenizer (synthetic weights): '
                              'it serves token ids only, for benchmarks')

    def renew(self, backend: Optional[str] = None,
              log: Callable[[str], None] = lambda _: None,
              max_context: Optional[int] = None) -> Decoder:
        """
        Swap in a fresh decoder (new cache, new graphs) on the same loaded weights.

        A benchmark session starts this way. backend may move within a family (eager and
        graphed, hf and hf-graphed) without loading the weights again; max_context resizes
        the new KV cache (a static cache is then only as long as the cell needs).
        """
        old = self.decoder
        name = pick_backend(backend or old.info.backend, old.device,
                            quant_method(self.source), log)
        family = next(f for f in FAMILIES if old.info.backend in f)
        if name not in family:
            raise EngineError(f'cannot renew a {old.info.backend} decoder as {name}: '
                              f'load the model again with backend {name}')
        info = replace(old.info, backend=name, max_context=max_context or old.info.max_context)
        device = old.device
        shared = old.weights if name in ('eager', 'graphed') else old.model
        # Let the old cache and graphs go before the new ones are made.
        self.decoder = old = None
        self.decoder = make_decoder(name, shared, info, device, log)
        return self.decoder

    def __post_init__(self):
        self.device: torch.device = self.decoder.device   # kept after close()

    def memory_allocated(self) -> Optional[int]:
        """Bytes of CUDA memory torch holds allocated on this engine's GPU; None on a CPU."""
        cuda = self.device.type == 'cuda'
        return torch.cuda.memory_allocated(self.device) if cuda else None

    def close(self) -> None:
        """Let the decoder (weights, cache, graphs) go and hand its device memory back."""
        self.decoder = None
        gc.collect()
        if self.device.type == 'cuda':
            torch.cuda.empty_cache()

    def generate(self, prompt_ids: Sequence[int], max_new_tokens: int,
                 sampling: Sampling = Sampling(),
                 cancelled: Callable[[], bool] = lambda: False) -> Generation:
        return Generation(self.decoder, self.tokenizer, self.stop_ids, prompt_ids,
                          max_new_tokens, sampling, cancelled)


def pick_backend(backend: str, device: torch.device, quantization: Optional[str] = None,
                 log: Callable[[str], None] = lambda _: None) -> str:
    """
    Resolve 'auto' and fall back from graph backends where there is no CUDA.

    quantization is the checkpoint's quant_method ('gptq', 'exl2') or None for float weights.
    """
    if backend not in BACKENDS:
        raise EngineError(f'unknown backend {backend!r}: choose one of {", ".join(BACKENDS)}')
    cuda = device.type == 'cuda'
    if quantization and quantization != 'gptq' and not cuda:
        raise EngineError(f'{quantization} checkpoints run only on backend exllamav2, which '
                          f'needs a CUDA GPU (device is {device.type})')
    if backend == 'auto':
        if quantization and quantization != 'gptq':
            return 'exllamav2'   # EXL2 (CUDA: checked above)
        # GPTQ too: our 4-bit kernels, which docs/PERF.md measures against exllamav2.
        backend = 'graphed' if cuda else 'eager'
    if backend in EXLLAMA and not quantization:
        raise EngineError(f'backend {backend} runs GPTQ or EXL2 checkpoints; this model has '
                          'float weights: append :gptq to the model spec for a 4-bit copy')
    if backend in ('hf', 'hf-graphed') and quantization:
        raise EngineError(f'backend {backend} loads float checkpoints only; run this '
                          f'{quantization} model with graphed or eager (GPTQ) or exllamav2')
    if backend in ('eager', 'graphed') and quantization and not cuda:
        log(f'{quantization} checkpoint on {device.type}: backend {backend} runs it with its '
            'weights dequantised to float once at load (the 4-bit kernels need CUDA)')
    if backend in GRAPHED and not cuda:
        log(f'backend {backend} needs CUDA graphs; on {device.type} it runs as '
            f'{GRAPHED[backend]} (the same forward, launched op by op)')
        return GRAPHED[backend]
    return backend


def load_weights(name: str, source: ModelSource, device: torch.device, dtype: torch.dtype,
                 max_context: int, log: Callable[[str], None] = lambda _: None):
    """Load what the decoders of backend name's family share: a model object or Weights."""
    if name in ('hf', 'hf-graphed'):
        from .hf import load_hf_model
        return load_hf_model(source, device, dtype)
    if name in EXLLAMA:
        from .exllama import load_model
        return load_model(source.path, device, max_context, log)
    from . import llama
    try:
        if source.hf_config is not None:
            config = llama.ModelConfig.from_hf(source.hf_config)
            return llama.from_state_dict(config, llama.synthetic_state_dict(
                config, device, dtype), device, dtype)
        # On CUDA the linears stay 4-bit for the kernels; a CPU runs the dequantised floats.
        return llama.load_hf_dir(source.path, device, dtype, packed=device.type == 'cuda')
    except (ValueError, FileNotFoundError) as exc:
        hint = '' if quant_method(source) else '; backend hf runs any transformers model'
        raise EngineError(f'backend {name} cannot load {source.name}: {exc}{hint}') from None


def make_decoder(name: str, shared, info: DecoderInfo, device: torch.device,
                 log: Callable[[str], None] = lambda _: None) -> Decoder:
    """Build a fresh decoder (cache, graphs) of backend name on loaded weights."""
    if name in ('hf', 'hf-graphed'):
        from .hf import HFDecoder, HFGraphedDecoder
        cls = HFGraphedDecoder if name == 'hf-graphed' else HFDecoder
        return cls(shared, info, device)
    if name in EXLLAMA:
        from .exllama import ExLlamaV2Decoder
        return ExLlamaV2Decoder(shared, info, device, name)
    from .native import NativeDecoder
    return NativeDecoder(shared, info, device, graphed=name == 'graphed', log=log)


def load(model: str = EMBEDDED, backend: str = 'auto', device: str = 'auto',
         dtype: str = 'auto', max_context: int = 2048,
         log: Callable[[str], None] = lambda _: None) -> Engine:
    """Resolve the model spec, load weights and tokenizer, and build the chosen backend."""
    start = time.perf_counter()
    torch_device = pick_device(device)
    torch_dtype = pick_dtype(dtype, torch_device)
    if backend not in BACKENDS:   # before resolving: a typo should not start a conversion
        pick_backend(backend, torch_device)
    source = resolve(model, log)
    name = pick_backend(backend, torch_device, quant_method(source), log)
    notes = [f'asked for {backend}'] if backend not in ('auto', name) else []
    if name in EXLLAMA:
        # exllamav2 computes in fp16 whatever was asked.
        if dtype not in ('auto', 'float16'):
            notes.append(f'dtype {dtype} ignored: exllamav2 computes in float16')
        torch_dtype = torch.float16
    tokenizer = load_tokenizer(source, log)
    info = DecoderInfo(backend=name, device=device_label(torch_device),
                       dtype=dtype_name(torch_dtype), model=source.name,
                       max_context=max_context, note='; '.join(notes))
    shared = load_weights(name, source, torch_device, torch_dtype, max_context, log)
    decoder = make_decoder(name, shared, info, torch_device, log)
    return Engine(decoder, tokenizer, stop_token_ids(source, tokenizer), source,
                  time.perf_counter() - start)
