"""
Load a model into an Engine: the decoder of the chosen backend, its tokenizer, where it came from.

load() resolves the model spec, picks the backend, reads the weights and the tokenizer and builds
the decoder; Engine holds the result, encodes prompts, starts generations, renews the decoder on
the same weights (a benchmark session) and lets it all go on close().
"""

from dataclasses import dataclass, replace
import gc
import json
import time
from typing import Callable, List, Optional, Sequence, Tuple

import torch

from .base import Decoder, DecoderInfo, EngineError, Sampling
from .decoders.backends import (Build, check_name as check_backend, NATIVE, pick as pick_backend,
                                record, stack_of, weights_key)
from .device import device_label, dtype_name, pick_device, pick_dtype
from .generate import Generation
from .kernels.config import KernelConfig
from .speculative import check_verifies, DraftModel, PromptLookup, Speculation
from .text import (encode_messages, encode_prompt, encode_text, encode_truncated,
                   load_tokenizer)
from .weights.resolve import EMBEDDED, resolve
from .weights.source import ModelSource, stop_token_ids
from ..structured import (check_output, compile_constraint, Constraint, ConstraintError,
                          OutputFormat, Vocabulary)
from ..structured.tools import (call_format, parse_tool_calls, template_shows_tools,
                                tools_system_text)


@dataclass
class Engine:
    """A loaded model: the decoder, its tokenizer and where it came from."""

    decoder: Decoder
    tokenizer: object
    stop_ids: frozenset
    source: ModelSource
    load_s: float
    kernel_config: Optional[KernelConfig] = None   # our kernels' configuration, on CUDA

    @property
    def info(self) -> DecoderInfo:
        return self.decoder.info

    def encode(self, text: str, use_chat_template: bool = True, system_prompt: str = '',
               output: OutputFormat = OutputFormat()) -> List[int]:
        """Encode one user turn; output's tools are shown to the model (ConstraintError)."""
        self._need_tokenizer()
        return encode_prompt(self.tokenizer, text, use_chat_template, system_prompt,
                             *self._shown_tools(output))

    def encode_messages(self, messages: Sequence[Tuple[str, str]], use_chat_template: bool = True,
                        system_prompt: str = '', output: OutputFormat = OutputFormat()
                        ) -> List[int]:
        """Encode a conversation of (role, content) messages (text.encode_messages)."""
        self._need_tokenizer()
        return encode_messages(self.tokenizer, messages, use_chat_template, system_prompt,
                               *self._shown_tools(output))

    def encode_truncated(self, text: str, limit: int, use_chat_template: bool = True,
                         system_prompt: str = '', output: OutputFormat = OutputFormat()
                         ) -> Tuple[List[int], int]:
        """Encode, dropping the start of text so the prompt takes at most limit tokens."""
        self._need_tokenizer()
        return encode_truncated(self.tokenizer, text, limit, use_chat_template, system_prompt,
                                *self._shown_tools(output))

    def _shown_tools(self, output: OutputFormat) -> Tuple[Optional[list], str]:
        # The tools go where the chat template shows them (specs for its tools argument), else
        # described in the system turn (the text).
        functions, choice = check_output(output)
        if not functions or choice == 'none':
            return None, ''
        template = getattr(self.tokenizer, 'chat_template', None)
        if not template_shows_tools(template):
            return None, tools_system_text(functions, call_format(template))
        specs = [f.spec() for f in functions]
        # The template's own text is read with its special tokens: none may come in a spec.
        text = json.dumps(specs, ensure_ascii=False)
        for token in self.tokenizer.all_special_tokens:
            if token in text:
                raise ConstraintError(f'tools hold the special token {token!r}')
        return specs, ''

    def tool_calls(self, text: str, output: OutputFormat) -> List[dict]:
        """Return the calls of output's tools in a reply: [{"name", "arguments"}]."""
        functions, choice = check_output(output)
        if not functions or choice == 'none':
            return []
        return parse_tool_calls(text, functions,
                                call_format(getattr(self.tokenizer, 'chat_template', None)))

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
        name = pick_backend(backend or old.info.backend, old.device, self.source.quant_method,
                            log)
        if weights_key(name) != weights_key(old.info.backend):
            raise EngineError(f'cannot renew a {old.info.backend} decoder as {name}: '
                              f'load the model again with backend {name}')
        info = replace(old.info, backend=name, max_context=max_context or old.info.max_context)
        chosen = record(name)
        shared = chosen.family.shared(old)
        build = Build(info, old.device, self.source, log, self.kernel_config, stack_of(name))
        # Let the old cache and graphs go before the new ones are made: a decoder is in
        # reference cycles (its launched steps call back into it), so only a collection frees
        # its memory. (A capture is kept from collections by NativeDecoder._captured.)
        self.decoder = old = None
        gc.collect()
        self.decoder = chosen.make(shared, build)
        return self.decoder

    def __post_init__(self):
        self.device: torch.device = self.decoder.device   # kept after close()
        self._vocabulary: Optional[Vocabulary] = None   # built at the first constrained reply

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
                 cancelled: Callable[[], bool] = lambda: False,
                 output: OutputFormat = OutputFormat(),
                 constraint: Optional[Constraint] = None, proposer=None) -> Generation:
        """
        Start a reply; output asks for JSON, a grammar or a tool call (ConstraintError if bad).

        constraint: output's grammar compiled already (constraint(output)), for a caller that
        checked it before the reply was due. proposer: speculative decoding's drafts
        (make_proposer), used where the decoder verifies drafts and the reply is
        not constrained.
        """
        if proposer is not None:
            check_verifies(self.decoder)
        return Generation(self.decoder, self.tokenizer, self.stop_ids, prompt_ids,
                          max_new_tokens, sampling, cancelled,
                          constraint if constraint is not None else self.constraint(output),
                          proposer)

    def constraint(self, output: OutputFormat) -> Optional[Constraint]:
        """Compile output's grammar for this model (None: free text); ConstraintError if bad."""
        if not output.constrained:
            return None
        self._need_tokenizer()
        if self._vocabulary is None:
            # The model's logits may be wider than its tokenizer (padded embeddings).
            self._vocabulary = Vocabulary(self.tokenizer, self.stop_ids,
                                          self.source.hf_config.get('vocab_size'))
        return compile_constraint(self._vocabulary, output,
                                  getattr(self.tokenizer, 'chat_template', None))


def load(model: str = EMBEDDED, backend: str = 'auto', device: str = 'auto',
         dtype: str = 'auto', max_context: int = 2048,
         log: Callable[[str], None] = lambda _: None,
         kernel_config: Optional[KernelConfig] = None, deterministic: bool = False) -> Engine:
    """
    Resolve the model spec, load weights and tokenizer, and build the chosen backend.

    kernel_config sets our kernels' launch shapes and switches (an A/B builds one per arm); by
    default config/kernels.yaml's entry for this GPU. deterministic: our GPU kernels add in a
    fixed order (KernelConfig.deterministic), so a seeded reply repeats bit for bit.
    """
    start = time.perf_counter()
    torch_device = pick_device(device)
    torch_dtype = pick_dtype(dtype, torch_device)
    if check_backend(backend):   # before resolving: a typo should not start a conversion
        pick_backend(backend, torch_device)
    source = resolve(model, log)
    name = pick_backend(backend, torch_device, source.quant_method, log, source.hf_config)
    chosen = record(name)
    notes = [f'asked for {backend}'] if backend not in ('auto', name) else []
    fixed = chosen.family.dtype
    if fixed is not None:
        if dtype not in ('auto', dtype_name(fixed)):
            notes.append(f'dtype {dtype} ignored: {name} computes in {dtype_name(fixed)}')
        torch_dtype = fixed
    if kernel_config is None and chosen.family is NATIVE and torch_device.type == 'cuda':
        kernel_config = KernelConfig.for_device(torch_device, log)
    if deterministic and kernel_config is not None and not kernel_config.deterministic:
        kernel_config = replace(kernel_config, deterministic=True)
        log('deterministic kernels: the GEMVs that add into the residual do not split K')
    tokenizer = load_tokenizer(source, log)
    info = DecoderInfo(backend=name, device=device_label(torch_device),
                       dtype=dtype_name(torch_dtype), model=source.name,
                       max_context=max_context, note='; '.join(notes))
    stack = stack_of(name)
    shared = chosen.load(source, torch_device, torch_dtype, max_context, log, stack)
    decoder = chosen.make(shared, Build(info, torch_device, source, log, kernel_config, stack))
    return Engine(decoder, tokenizer, stop_token_ids(source, tokenizer), source,
                  time.perf_counter() - start, kernel_config)


def make_proposer(speculation: Speculation, target: Engine,
                  log: Callable[[str], None] = lambda _: None):
    """
    Return the proposer for a speculation setting beside target (None when off).

    A backend that cannot verify drafts is refused before a draft model is loaded
    (load_draft).
    """
    if not speculation.on:
        return None
    check_verifies(target.decoder)
    if speculation.kind == 'ngram':
        return PromptLookup(speculation.k)
    return DraftModel(load_draft(speculation.draft_model, target, log), speculation.k)


def load_draft(model: str, target: Engine, log: Callable[[str], None] = lambda _: None,
               max_context: Optional[int] = None) -> Engine:
    """
    Load a draft model beside target: its backend, device, dtype and context (or max_context).

    EngineError unless it shares target's vocabulary (a draft proposes the model's token ids).
    """
    info = target.info
    draft = load(model, backend=info.backend, device=str(target.device), dtype=info.dtype,
                 max_context=max_context or info.max_context, log=log,
                 deterministic=target.kernel_config is not None
                 and target.kernel_config.deterministic)
    vocab, draft_vocab = (target.decoder.step_facts().config.vocab_size,
                          draft.decoder.step_facts().config.vocab_size)
    if vocab != draft_vocab:
        draft.close()
        raise EngineError(f'draft model {model} has a vocabulary of {draft_vocab} tokens, '
                          f"the model {vocab}: a draft must share the model's tokenizer")
    return draft
