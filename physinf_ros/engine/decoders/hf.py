"""
The reference backends: the transformers forward, one token per step.

`hf` uses a DynamicCache and launches every op from Python (what most robot stacks run);
`hf-graphed` holds the keys and values in a StaticCache and replays the one-token forward from a
captured CUDA graph (the best the stock transformers forward does). Every other backend is
checked against `hf` on the same weights.

Both take a software stack (stacks.py): an attention implementation, set on the shared model
by each new decoder (sessions of different stacks interleave on one model) with SDPA's kernel
forced around every forward; or a quantisation stack, applied when the weights load, whose
one-token forward `hf-graphed` compiles when the stack's package recommends it.
"""

import inspect

import torch

from .forward import ForwardDecoder
from .stacks import Attention, ATTENTIONS, Quantization
from ..base import DecoderInfo, StepFacts
from ..model.config import ModelConfig
from ..model.llama import synthetic_state_dict
from ..weights.source import ModelSource

DEFAULT_ATTENTION = ATTENTIONS[0]   # sdpa with torch's own kernel choice


def load_hf_model(source: ModelSource, device: torch.device, dtype: torch.dtype):
    """Load a transformers causal LM (or build a synthetic one) onto device, in eval mode."""
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()  # a progress bar per load is noise in a node's log
    if not source.synthetic:
        model = AutoModelForCausalLM.from_pretrained(str(source.path), dtype=dtype)
        return model.to(device).eval()
    # Synthetic: the same random weights our own backends build from this spec.
    config = dict(source.hf_config)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(
            AutoConfig.for_model(config.pop('model_type'), **config), dtype=dtype)
    state = synthetic_state_dict(ModelConfig.from_hf(source.hf_config), device, dtype)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or set(missing) - {'lm_head.weight'}:
        raise RuntimeError(f'synthetic weights do not fit: missing {missing}, extra {unexpected}')
    return model.eval()


class HFDecoder(ForwardDecoder):
    """transformers forward with a DynamicCache."""

    def __init__(self, model, info: DecoderInfo, device: torch.device, stack=None):
        super().__init__(info, device)
        self.model = model
        self._cache = None
        # transformers renamed past_key_values to cache (5.2x); use whichever this one takes.
        params = inspect.signature(model.forward).parameters
        self._cache_arg = 'cache' if 'cache' in params else 'past_key_values'
        self.attention: Attention = stack if isinstance(stack, Attention) else DEFAULT_ATTENTION
        self.quantization = stack if isinstance(stack, Quantization) else None
        model.set_attn_implementation(self.attention.implementation)

    def step_facts(self) -> StepFacts:
        """Return the model's shape and storage; ValueError outside the families we decode."""
        element = self.model.dtype.itemsize
        weight_format = self.quantization.weight_format if self.quantization else None
        return StepFacts(ModelConfig.from_hf(self.model.config.to_dict()), element, element,
                         weight_format=weight_format)

    def _reset_cache(self) -> None:
        from transformers import DynamicCache
        self._cache = DynamicCache(config=self.model.config)

    def _crop_cache(self, length: int) -> bool:
        cache = self._cache
        if cache is None:
            return False
        held = cache.get_seq_length()
        if held < length:
            return False
        if held > length:
            # A negative count removes that many tokens from the end, in every transformers 5
            # release (5.2x refuses a positive one); crop(0) is skipped, as older ones emptied.
            cache.crop(length - held)
        return True

    def _run(self, ids: torch.Tensor, positions: torch.Tensor = None,
             forward=None) -> torch.Tensor:
        with self.attention.context():
            out = (forward or self.model)(input_ids=ids, cache_position=positions,
                                          use_cache=True, logits_to_keep=1,
                                          **{self._cache_arg: self._cache})
        return out.logits[0, -1].float()

    def _forward(self, ids: torch.Tensor, start: int) -> torch.Tensor:
        return self._run(ids)


class HFGraphedDecoder(HFDecoder):
    """transformers forward with a StaticCache; each decode step replays one CUDA graph."""

    def __init__(self, model, info: DecoderInfo, device: torch.device, stack=None):
        super().__init__(model, info, device, stack)
        from transformers import StaticCache
        self._cache = StaticCache(config=model.config, max_cache_len=info.max_context)
        self._ids = torch.zeros(1, 1, dtype=torch.long, device=device)
        self._positions = torch.zeros(1, dtype=torch.long, device=device)
        self._graph = None
        # Not `_logits`: ForwardDecoder keeps each step's chosen logits under that name, and
        # sharing it made every replay after the first return the first replay's copy.
        self._graph_logits = None
        self._step_forward = _compiled(model) if self.quantization and \
            self.quantization.compiled_step and device.type == 'cuda' else None

    def _reset_cache(self) -> None:
        self._cache.reset()  # in place: the captured graph keeps pointing at the same tensors

    def _crop_cache(self, length: int) -> bool:
        # StaticCache writes at its own device counters (see _capture): no prefix is kept.
        return False

    def _forward(self, ids: torch.Tensor, start: int) -> torch.Tensor:
        n = ids.shape[1]
        positions = torch.arange(start, start + n, device=self.device)
        if n > 1 or self.device.type != 'cuda':
            return self._run(ids, positions)
        self._ids.copy_(ids)
        self._positions.copy_(positions)
        if self._graph is None:
            self._capture()
        self._graph.replay()
        return self._graph_logits.clone()

    def _capture(self) -> None:
        # transformers 5's StaticCache writes at its own device counter (cumulative_length), not
        # at cache_position: the warm-up runs must not advance it, or every replayed step
        # writes its key and value two slots ahead of where attention reads them.
        counters = [(layer.cumulative_length, layer.cumulative_length.clone())
                    for layer in self._cache.layers
                    if isinstance(getattr(layer, 'cumulative_length', None), torch.Tensor)]
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(2):  # same inputs, same cache slot: warm-up writes what the step will
                self._run(self._ids, self._positions, self._step_forward)
            for counter, before in counters:
                counter.copy_(before)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        self._graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self._graph):
            self._graph_logits = self._run(self._ids, self._positions, self._step_forward)


def _compiled(model):
    # One compiled forward per loaded model, kept across its decoders: a new session with the
    # same cache shape reuses it. Inductor's own CUDA graphs stay off: the step is captured in
    # ours.
    compiled = getattr(model, '_physinf_compiled_forward', None)
    if compiled is None:
        compiled = torch.compile(model.forward, mode='max-autotune-no-cudagraphs')
        model._physinf_compiled_forward = compiled
    return compiled
