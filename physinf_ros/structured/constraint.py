"""
The token mask a request's output format allows: a JSON schema or a grammar, via llguidance.

llguidance was chosen over xgrammar by measurement on this project's robot schemas
(docs/STRUCTURED.md, benchmarks/results/dev/grammar_masks.json): it compiles a schema in
under a millisecond where xgrammar took up to seconds with a 128k vocabulary (a goal waits for
its compile), its mask's p99 was lower at 128k, and it needs no torch of its own.

A Constraint follows one reply: mask() says which token ids may come next, advance(token)
feeds the chosen one. The stop tokens are allowed exactly where the grammar may end, so a
grammar that is complete ends the reply as an ordinary end of sequence.
"""

from dataclasses import dataclass
import json
from typing import Iterable, List, Optional

import numpy as np
import torch

# JSON as models write it and json.dumps prints it: one space after ',' and ':', no other
# whitespace (free whitespace lets a small model pad a reply with newlines until max_new_tokens).
JSON_OPTIONS = {'whitespace_flexible': False, 'item_separator': ', ', 'key_separator': ': ',
                # A keyword a grammar cannot enforce (uniqueItems, say) is kept as a warning
                # the caller reports, rather than refusing the whole schema.
                'lenient': True}
ANY_JSON_OBJECT = {'type': 'object'}


class ConstraintError(ValueError):
    """A request's output format that cannot be used; the message says why and what to fix."""


@dataclass(frozen=True)
class OutputFormat:
    """
    What a request asks its reply to be; empty fields ask for free text.

    response_format: a JSON schema, or {"type": "json_object"} for any JSON object (also the
    OpenAI wrapper {"type": "json_schema", "json_schema": {"schema": ...}}). grammar: a grammar
    in llguidance's Lark syntax (a regex as `start: /.../`). tools and tool_choice: functions
    the model may call (structured.tools); with tool_choice `required` or a function's name the
    reply is that call, constrained to the functions' schemas.
    """

    response_format: str = ''
    grammar: str = ''
    tools: str = ''
    tool_choice: str = ''

    @property
    def constrained(self) -> bool:
        return bool(self.response_format.strip() or self.grammar.strip() or (
            self.tools.strip() and self.tool_choice.strip() not in ('', 'auto', 'none')))


def json_schema(response_format: str) -> dict:
    """Return the JSON schema a response_format asks for; ConstraintError if it is none."""
    try:
        value = json.loads(response_format)
    except ValueError as exc:
        raise ConstraintError(f'response_format is not JSON: {exc}') from None
    if not isinstance(value, dict):
        raise ConstraintError('response_format must be a JSON object: a JSON schema, or '
                              '{"type": "json_object"}')
    if value.get('type') == 'json_object' and set(value) == {'type'}:
        return ANY_JSON_OBJECT
    if value.get('type') == 'json_schema':
        schema = (value.get('json_schema') or {}).get('schema')
        if not isinstance(schema, dict):
            raise ConstraintError('response_format of type json_schema needs '
                                  '{"json_schema": {"schema": {...}}}')
        return schema
    return value


class Vocabulary:
    """
    A model's tokens as llguidance sees them; building one takes 0.3-1 s, so keep it.

    n_vocab is the width of the model's logits, which may exceed the tokenizer's (padded
    embeddings): ids past the tokenizer's are never allowed. stop_ids are the tokens that end
    a reply; they are allowed where the grammar may end.
    """

    def __init__(self, tokenizer, stop_ids: Iterable[int], n_vocab: Optional[int] = None):
        import llguidance
        self.n_vocab = max(n_vocab or 0, len(tokenizer))
        self.stop_ids = sorted(stop_ids)
        if not self.stop_ids:
            raise ConstraintError('the model has no end-of-sequence token to end a reply with')
        self.tokens = llguidance.LLTokenizer(tokenizer_json(tokenizer), n_vocab=self.n_vocab,
                                             eos_token=self.stop_ids)


def tokenizer_json(tokenizer) -> str:
    """
    Return a fast tokenizer's tokenizer.json as llguidance should read it (its tokens' bytes).

    A byte-level BPE's decoder is its ByteLevel step alone. transformers 5.17 converts a GGUF's
    byte-level BPE (the embedded model's) with sentencepiece's decoders before that step
    (ByteFallback, Fuse, Replace of U+2581); llguidance then takes each token's text for its
    bytes ('Ġ"' for ' "'), and its masks allow tokens it then refuses to consume. Decoding
    is right either way: the ByteLevel step comes last.
    """
    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    spec['padding'] = spec['truncation'] = None   # as llguidance.hf.from_tokenizer reads it
    decoder = spec.get('decoder') or {}
    steps = (decoder.get('decoders') or []) if decoder.get('type') == 'Sequence' else []
    byte_level = [step for step in steps if step.get('type') == 'ByteLevel']
    if byte_level and 'ByteLevel' in json.dumps(spec.get('pre_tokenizer')):
        spec['decoder'] = byte_level[0]
    return json.dumps(spec)


class Constraint:
    """One reply's position in its grammar: which tokens may come next."""

    def __init__(self, vocabulary: Vocabulary, grammar: str):
        import llguidance
        self.vocabulary = vocabulary
        self._matcher = llguidance.LLMatcher(vocabulary.tokens, grammar, log_level=0)
        if self._matcher.is_error():
            raise ConstraintError(f'grammar does not compile: {self._matcher.get_error()}')
        self.warnings: List[str] = list(self._matcher.get_grammar_warnings())
        words = (vocabulary.n_vocab + 31) // 32
        # The mask as last filled: what a decoder reads (engine.base.AllowedTokens).
        self.bits = np.zeros(words, dtype=np.int32)
        self.dead_end = ''   # why no token can follow, once that happens

    @property
    def finished(self) -> bool:
        """Say whether the grammar is complete: only a stop token can follow."""
        return self._matcher.is_stopped()

    def fill_bitmask(self) -> np.ndarray:
        """
        Compute the tokens allowed next as int32 words, bit i of word w for token 32 w + i.

        The library's whole cost per token; the array is reused by the next call.
        """
        self._matcher.unsafe_compute_mask_ptr(self.bits.ctypes.data, self.bits.nbytes)
        if self._matcher.is_error() or not self.bits.any():
            self.dead_end = self._matcher.get_error() or 'the grammar allows no next token'
        return self.bits

    def mask(self) -> torch.Tensor:
        """Bool [n_vocab]: the token ids allowed next (all False at a dead end)."""
        self.fill_bitmask()
        return self.last_mask()

    def last_mask(self) -> torch.Tensor:
        """Bool [n_vocab]: the mask as last filled, unpacked (not computed again)."""
        # 0/1 bytes viewed as bools: no copy past the unpacking.
        return torch.from_numpy(np.unpackbits(self.bits.view(np.uint8),
                                              count=self.vocabulary.n_vocab,
                                              bitorder='little').view(np.bool_))

    def allows(self, token: int) -> bool:
        """Say whether the mask as last filled allows token (the one a step chose under)."""
        return 0 <= token < self.vocabulary.n_vocab and bool(
            (int(self.bits[token // 32]) >> (token % 32)) & 1)

    def advance(self, token: int) -> bool:
        """Feed the chosen token; False (and dead_end set) when the grammar refuses it."""
        if token in self.vocabulary.stop_ids:
            return self._matcher.is_accepting()
        if not self._matcher.consume_token(token):
            self.dead_end = self._matcher.get_error() or f'token {token} is not allowed here'
            return False
        return True
