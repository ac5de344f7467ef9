"""Text in and out: chat-template prompts and streaming detokenisation."""

from typing import Callable, List, Tuple

from .base import EngineError

TOKENIZER_FILES = ('tokenizer.json', 'tokenizer_config.json', 'tokenizer.model')


def load_tokenizer(source, log: Callable[[str], None] = lambda _: None):
    """Load the model's tokenizer; None for weights that come without one (benchmarks)."""
    if source.synthetic or not any((source.path / f).is_file() for f in TOKENIZER_FILES):
        log(f'{source.name} has no tokenizer: it serves token ids only')
        return None
    from transformers import AutoTokenizer
    try:
        return AutoTokenizer.from_pretrained(str(source.path))
    except (OSError, ValueError) as exc:
        raise EngineError(f'tokenizer in {source.path} could not be loaded: {exc}') from None


def encode_prompt(tokenizer, text: str, use_chat_template: bool = True,
                  system_prompt: str = '') -> List[int]:
    """Token ids for one user turn, wrapped in the model's chat template when asked."""
    if use_chat_template and getattr(tokenizer, 'chat_template', None):
        messages = [{'role': 'system', 'content': system_prompt}] if system_prompt else []
        messages.append({'role': 'user', 'content': text})
        rendered = tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False)
        # The template already holds the special tokens; adding them again would double BOS.
        return tokenizer.encode(rendered, add_special_tokens=False)
    if system_prompt:
        text = f'{system_prompt}\n\n{text}'
    return tokenizer.encode(text)


def encode_truncated(tokenizer, text: str, limit: int, use_chat_template: bool = True,
                     system_prompt: str = '') -> Tuple[List[int], int]:
    """
    Return token ids for one user turn cut to at most limit tokens, and the text tokens cut.

    The beginning of the text is dropped (the oldest part of a long message); the template and
    the system prompt stay whole, so the model still sees a well-formed turn.
    """
    ids = encode_prompt(tokenizer, text, use_chat_template, system_prompt)
    if len(ids) <= limit:
        return ids, 0
    body = tokenizer.encode(text, add_special_tokens=False)
    overhead = len(ids) - len(body)
    keep = limit - overhead
    # Text decoded from a cut token list re-encodes to about as many tokens, not always
    # exactly as many: shrink until the whole prompt fits.
    while keep > 0:
        tail = tokenizer.decode(body[-keep:]).lstrip('\ufffd')
        ids = encode_prompt(tokenizer, tail, use_chat_template, system_prompt)
        if len(ids) <= limit:
            return ids, len(body) - keep
        keep -= len(ids) - limit
    raise EngineError(f'the chat template and system prompt alone take {overhead} tokens, '
                      f'no fewer than the {limit} a prompt may have: shorten system_prompt or '
                      'raise max_context')


class Detokenizer:
    """
    Turns a growing list of token ids into text pieces as soon as they are whole.

    Pieces are decoded with a few tokens of left context, so that word-start spaces come out
    right, and held back while they end in a partial UTF-8 character. The pieces, joined, are
    exactly the reply.
    """

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        self._ids: List[int] = []
        self._prefix = 0   # start of the context window
        self._read = 0     # end of what has been emitted

    def _decode(self, ids: List[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=True)

    def push(self, token_id: int) -> str:
        """Add one token; return the new text it completes ('' while incomplete)."""
        self._ids.append(token_id)
        done = self._decode(self._ids[self._prefix:self._read])
        text = self._decode(self._ids[self._prefix:])
        if len(text) <= len(done) or text.endswith('\ufffd'):
            return ''
        self._prefix, self._read = self._read, len(self._ids)
        return text[len(done):]

    def flush(self) -> str:
        """Whatever is still held back (a dangling partial character) at the end."""
        done = self._decode(self._ids[self._prefix:self._read])
        text = self._decode(self._ids[self._prefix:])
        self._prefix = self._read = len(self._ids)
        return text[len(done):] if len(text) > len(done) else ''
