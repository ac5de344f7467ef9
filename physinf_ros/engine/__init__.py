"""ROS-free decoding engine: model loading, backends, sampling and the generation loop."""

from dataclasses import dataclass, replace
import time
from typing import Callable, List, Optional, Sequence, Tuple

import torch

from .base import ContextFull, Decoder, DecoderInfo, EngineError, Sampling
from .device import device_label, dtype_name, pick_device, pick_dtype
from .generate import Generation
from .models import EMBEDDED, ModelSource, resolve, stop_token_ids
from .text import encode_prompt, encode_truncated, load_tokenizer

# hf: transformers, eager. hf-graphed: transformers + StaticCache + one CUDA graph per step.
# eager: our forward op by op. graphed: our whole step in one CUDA graph. auto: the fastest here.
BACKENDS = ('auto', 'hf', 'hf-graphed', 'eager', 'graphed')
GRAPHED = {'graphed': 'eager', 'hf-graphed': 'hf'}   # what each falls back to without CUDA
FAMILIES = ({'eager', 'graphed'}, {'hf', 'hf-graphed'})  # backends that share loaded weights

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

    def _need_tokenizer(self) -> None:
        if self.tokenizer is None:
            raise EngineError(f'{self.source.name} has no tokenizer (synthetic weights): '
                              'it serves token ids only, for benchmarks')

    def renew(self, backend: Optional[str] = None,
              log: Callable[[str], None] = lambda _: None) -> Decoder:
        """
        Swap in a fresh decoder (new cache, new graphs) on the same loaded weights.

        A benchmark session starts this way. backend may move within a family (eager and
        graphed, hf and hf-graphed) without loading the weights again.
        """
        old = self.decoder
        name = pick_backend(backend or old.info.backend, old.device, log)
        family = next(f for f in FAMILIES if old.info.backend in f)
        if name not in family:
            raise EngineError(f'cannot renew a {old.info.backend} decoder as {name}: '
                              f'load the model again with backend {name}')
        info, device = replace(old.info, backend=name), old.device
        shared = old.model if name in ('hf', 'hf-graphed') else old.weights
        # Let the old cache and graphs go before the new ones are made.
        self.decoder = old = None
        if name in ('hf', 'hf-graphed'):
            from .hf import HFDecoder, HFGraphedDecoder
            cls = HFGraphedDecoder if name == 'hf-graphed' else HFDecoder
            self.decoder = cls(shared, info, device)
        else:
            from .native import NativeDecoder
            self.decoder = NativeDecoder(shared, info, device, graphed=name == 'graphed', log=log)
        return self.decoder

    def generate(self, prompt_ids: Sequence[int], max_new_tokens: int,
                 sampling: Sampling = Sampling(),
                 cancelled: Callable[[], bool] = lambda: False) -> Generation:
        return Generation(self.decoder, self.tokenizer, self.stop_ids, prompt_ids,
                          max_new_tokens, sampling, cancelled)


def pick_backend(backend: str, device: torch.device,
                 log: Callable[[str], None] = lambda _: None) -> str:
    """Resolve 'auto' and fall back from graph backends where there is no CUDA."""
    if backend not in BACKENDS:
        raise EngineError(f'unknown backend {backend!r}: choose one of {", ".join(BACKENDS)}')
    if backend == 'auto':
        return 'graphed' if device.type == 'cuda' else 'eager'
    if backend in GRAPHED and device.type != 'cuda':
        log(f'backend {backend} needs CUDA graphs; on {device.type} it runs as '
            f'{GRAPHED[backend]} (the same forward, launched op by op)')
        return GRAPHED[backend]
    return backend


def load(model: str = EMBEDDED, backend: str = 'auto', device: str = 'auto',
         dtype: str = 'auto', max_context: int = 2048,
         log: Callable[[str], None] = lambda _: None) -> Engine:
    """Resolve the model spec, load weights and tokenizer, and build the chosen backend."""
    start = time.perf_counter()
    torch_device = pick_device(device)
    torch_dtype = pick_dtype(dtype, torch_device)
    name = pick_backend(backend, torch_device, log)
    source = resolve(model, log)
    tokenizer = load_tokenizer(source, log)
    info = DecoderInfo(backend=name, device=device_label(torch_device),
                       dtype=dtype_name(torch_dtype), model=source.name,
                       max_context=max_context,
                       note=f'asked for {backend}' if backend not in ('auto', name) else '')
    if name in ('hf', 'hf-graphed'):
        from .hf import HFDecoder, HFGraphedDecoder, load_hf_model
        cls = HFGraphedDecoder if name == 'hf-graphed' else HFDecoder
        decoder = cls(load_hf_model(source, torch_device, torch_dtype), info, torch_device)
    else:
        from . import llama
        from .native import NativeDecoder
        try:
            if source.hf_config is not None:
                config = llama.ModelConfig.from_hf(source.hf_config)
                weights = llama.from_state_dict(config, llama.synthetic_state_dict(
                    config, torch_device, torch_dtype), torch_device, torch_dtype)
            else:
                weights = llama.load_hf_dir(source.path, torch_device, torch_dtype)
        except (ValueError, FileNotFoundError) as exc:
            raise EngineError(f'backend {name} cannot load {source.name}: {exc}; '
                              'backend hf runs any transformers model') from None
        decoder = NativeDecoder(weights, info, torch_device, graphed=name == 'graphed', log=log)
    return Engine(decoder, tokenizer, stop_token_ids(source, tokenizer), source,
                  time.perf_counter() - start)
