"""
Backend `exllamav2`: GPTQ and EXL2 checkpoints on ExLlamaV2 0.3.2's own model and KV cache.

`exllamav2` keeps keys and values in fp16; `exllamav2-q4` and `exllamav2-q8` keep them in its
grouped 4- and 8-bit caches (one fp16 scale per 32 values), for long contexts on small cards.
The step is exllamav2's stock forward with fp16 activations: C++ attention front half and MLP
(each replayed from its own small CUDA graph once it has run 205 times at one shape), torch
attention, C++ output projection. docs/EXLLAMAV2.md explains where its time goes.

Two behaviours of exllamav2 0.3.2 are handled here:
- importing it calls torch.set_num_threads(1) for the whole process: the count is put back.
- without flash-attn or xformers, its SDPA path runs a multi-token forward with no causal mask
  (attn.py `_attn_torch` asks for a block-diagonal mask, which is None without cu_seqlens), so
  each prompt token would attend to the tokens after it. Multi-token forwards here switch on
  its `no_sdpa` option, which takes its matmul path with an explicit causal mask; one-token
  steps need no mask and keep SDPA.
"""

from contextlib import contextmanager
from importlib.util import find_spec
import os
from pathlib import Path
from typing import Callable, Sequence

import torch

from .forward import ForwardDecoder
from ..base import ContextFull, DecoderInfo, EngineError, StepFacts
from ..model.config import ModelConfig
from ..weights.source import quant_method

VERSION = '0.3.2'
CACHES = {'exllamav2': 'fp16', 'exllamav2-q4': 'q4', 'exllamav2-q8': 'q8'}
# Bytes per cached key or value element: codes plus one fp16 scale per 32 elements.
KV_BYTES_PER_ELEMENT = {'fp16': 2.0, 'q4': 0.5 + 2 / 32, 'q8': 1.0 + 2 / 32}
INSTALL = (f'pip install --no-deps exllamav2=={VERSION}, plus its imports: pip install '
           'tokenizers ninja rich pillow (its CUDA extension then builds on first use, about '
           "2 minutes, and needs a CUDA GPU, nvcc matching torch's CUDA version and a C++ "
           'compiler; MAX_JOBS and TORCH_CUDA_ARCH_LIST speed it up)')


def import_exllamav2(device: torch.device):
    """Import exllamav2 for device, keeping torch's thread count; EngineError if it cannot."""
    if device.type != 'cuda':
        raise EngineError(
            f'backend exllamav2 runs on a CUDA GPU only (device is {device.type}); on a GPU '
            f'machine: {INSTALL}. Here, backend eager runs GPTQ checkpoints dequantised')
    if find_spec('exllamav2') is None:
        raise EngineError(f'backend exllamav2 needs the exllamav2 package: {INSTALL}')
    threads = torch.get_num_threads()
    module_loading = os.environ.get('CUDA_MODULE_LOADING')
    try:
        import exllamav2
    except ImportError as exc:
        raise EngineError(f'exllamav2 is installed but cannot be imported ({exc}): '
                          f'{INSTALL}') from None
    except (OSError, RuntimeError) as exc:
        raise EngineError(f'exllamav2 could not build or load its CUDA extension ({exc}): '
                          f'{INSTALL}') from None
    finally:
        torch.set_num_threads(threads)
        if module_loading is None:
            os.environ.pop('CUDA_MODULE_LOADING', None)
        else:
            os.environ['CUDA_MODULE_LOADING'] = module_loading
    return exllamav2


def load_model(path: Path, device: torch.device, max_context: int,
               log: Callable[[str], None] = lambda _: None):
    """Load a GPTQ or EXL2 directory into exllamav2 on device, for contexts of max_context."""
    exllamav2 = import_exllamav2(device)
    if device.index not in (None, 0):
        raise EngineError('backend exllamav2 loads onto cuda:0 here; pick the GPU with '
                          'CUDA_VISIBLE_DEVICES instead of device cuda:N')
    if exllamav2.__version__ != VERSION:
        log(f'warning: exllamav2 {exllamav2.__version__} found; this backend is written '
            f'against {VERSION}')
    try:
        config = exllamav2.ExLlamaV2Config(str(path))
    except (AssertionError, KeyError, TypeError, ValueError) as exc:
        raise EngineError(f'exllamav2 cannot read {path}: {exc!r}') from None
    config.max_seq_len = max_context   # sizes its rope tables and attention buffers
    try:
        model = exllamav2.ExLlamaV2(config)
        model.load()
    except (AssertionError, RuntimeError, ValueError) as exc:
        raise EngineError(f'exllamav2 cannot load {path}: {exc!r}') from None
    log(f'exllamav2 {exllamav2.__version__} loaded {path.name}')
    return model


@contextmanager
def causal_attention(config):
    """Within: exllamav2's torch attention takes its masked matmul path (see module doc)."""
    saved = config.no_sdpa
    config.no_sdpa = True
    try:
        yield
    finally:
        config.no_sdpa = saved


class ExLlamaV2Decoder(ForwardDecoder):
    """The Decoder protocol on an exllamav2 model; backend picks the KV cache kind."""

    def __init__(self, model, info: DecoderInfo, device: torch.device, backend: str,
                 hf_config: dict):
        super().__init__(info, device)
        self.ids_device = torch.device('cpu')   # exllamav2 keeps the embedding table on the host
        self.model = model
        self.kv_cache = CACHES[backend]
        exllamav2 = import_exllamav2(device)
        cache_class = {'fp16': exllamav2.ExLlamaV2Cache, 'q4': exllamav2.ExLlamaV2Cache_Q4,
                       'q8': exllamav2.ExLlamaV2Cache_Q8}[self.kv_cache]
        self.cache = cache_class(model, max_seq_len=info.max_context, batch_size=1)
        self.hf_config = hf_config   # the checkpoint's config.json

    def step_facts(self) -> StepFacts:
        """fp16 tensors, GPTQ codes with v1 zeros (half a byte) as stored, its cache's width."""
        method = quant_method(self.hf_config)
        group_size = None
        if method == 'gptq':
            group_size = self.hf_config['quantization_config'].get('group_size')
        return StepFacts(ModelConfig.from_hf(self.hf_config), 2.0,
                         KV_BYTES_PER_ELEMENT[self.kv_cache], group_size, 0.5, method)

    def _reset_cache(self) -> None:
        self.cache.current_seq_len = 0

    def _run(self, ids: torch.Tensor, last_only: bool) -> torch.Tensor:
        if ids.shape[1] == 1:
            return self.model.forward(ids, self.cache, last_id_only=last_only)
        with causal_attention(self.model.config):
            return self.model.forward(ids, self.cache, last_id_only=last_only)

    def _forward(self, ids: torch.Tensor, start: int) -> torch.Tensor:
        if start != self.cache.current_seq_len:
            raise EngineError(f'exllamav2 cache holds {self.cache.current_seq_len} tokens, '
                              f'expected {start}')
        return self._run(ids, last_only=True)[0, -1].float()

    @torch.inference_mode()
    def prompt_logits(self, token_ids: Sequence[int]) -> torch.Tensor:
        """Teacher-forced float32 logits [n, vocab] of a token sequence; ends any reply."""
        if len(token_ids) > self.info.max_context:
            raise ContextFull(f'{len(token_ids)} tokens do not fit a context of '
                              f'{self.info.max_context}')
        self._reset_cache()
        self._last_token = None   # the cache now holds this sequence, not a reply
        self._position = len(token_ids)
        ids = torch.tensor([list(token_ids)], dtype=torch.long, device=self.ids_device)
        return self._run(ids, last_only=False)[0].float()
