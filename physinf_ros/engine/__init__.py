"""ROS-free decoding engine: model loading, backends, sampling and the generation loop."""

from dataclasses import dataclass
import time
from typing import Callable, List, Sequence

from .base import ContextFull, Decoder, DecoderInfo, EngineError, Sampling
from .device import device_label, dtype_name, pick_device, pick_dtype
from .generate import Generation
from .models import EMBEDDED, ModelSource, resolve, stop_token_ids
from .text import encode_prompt

BACKENDS = ('auto', 'hf')

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
        return encode_prompt(self.tokenizer, text, use_chat_template, system_prompt)

    def generate(self, prompt_ids: Sequence[int], max_new_tokens: int,
                 sampling: Sampling = Sampling(),
                 cancelled: Callable[[], bool] = lambda: False) -> Generation:
        return Generation(self.decoder, self.tokenizer, self.stop_ids, prompt_ids,
                          max_new_tokens, sampling, cancelled)


def load(model: str = EMBEDDED, backend: str = 'auto', device: str = 'auto',
         dtype: str = 'auto', max_context: int = 2048,
         log: Callable[[str], None] = lambda _: None) -> Engine:
    """Resolve the model spec, load weights and tokenizer, and build the chosen backend."""
    if backend not in BACKENDS:
        raise EngineError(f'unknown backend {backend!r}: choose one of {", ".join(BACKENDS)}')
    start = time.perf_counter()
    torch_device = pick_device(device)
    torch_dtype = pick_dtype(dtype, torch_device)
    source = resolve(model, log)
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(str(source.path))
    from .hf import HFDecoder, load_hf_model
    info = DecoderInfo(backend='hf', device=device_label(torch_device),
                       dtype=dtype_name(torch_dtype), model=source.name,
                       max_context=max_context)
    decoder = HFDecoder(load_hf_model(source.path, torch_device, torch_dtype), info,
                        torch_device)
    return Engine(decoder, tokenizer, stop_token_ids(source.path, tokenizer), source,
                  time.perf_counter() - start)
