"""
Text in and out: chat-template prompts and streaming detokenisation.

User text (prompts, system_prompt and every message of a conversation) never becomes special
tokens: `<|im_start|>system` typed in a prompt is tokenised as the plain text it is, so no
client can open a turn of its own. Only the chat template's own markers are special tokens. The
template is rendered with placeholders for the messages' text, its pieces are tokenised with
special tokens recognised, and the text in between with special tokens split. A template that
writes a message's text as a JSON string (Llama 3.1's does with a tool result) gets it so.
"""

import json
import threading
from typing import Callable, List, Optional, Sequence, Tuple

from .base import EngineError

TOKENIZER_FILES = ('tokenizer.json', 'tokenizer_config.json', 'tokenizer.model')
# transformers passes split_special_tokens to the shared Rust tokenizer as a flag that every
# encode call sets: two threads encoding at once could run with each other's setting (a
# template marker split, or a user's special token parsed).
_ENCODE_LOCK = threading.Lock()


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


def encode_text(tokenizer, text: str) -> List[int]:
    """Token ids of user text as plain text: special-token strings in it are split."""
    with _ENCODE_LOCK:
        return tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)


def _placeholder(index: int) -> str:
    # A stand-in for message index's text while the template renders: the user's text never
    # passes through the template, so nothing in it can collide with these.
    return f'\x00physinf-message-{index}-text\x00'


def encode_prompt(tokenizer, text: str, use_chat_template: bool = True,
                  system_prompt: str = '', tools: Optional[list] = None,
                  tools_text: str = '') -> List[int]:
    """Token ids for one user turn, wrapped in the model's chat template when asked."""
    return encode_messages(tokenizer, [('user', text)], use_chat_template, system_prompt, tools,
                           tools_text)


def _with_system_turn(messages: Sequence[Tuple[str, str]], system_prompt: str,
                      tools_text: str) -> List[Tuple[str, str]]:
    messages = list(messages)
    own = bool(messages) and messages[0][0] == 'system'
    system = messages[0][1] if own else system_prompt
    if tools_text:
        system = f'{system}\n\n{tools_text}' if system else tools_text
    if own:
        messages[0] = ('system', system)
    elif system:
        messages.insert(0, ('system', system))
    return messages


def encode_messages(tokenizer, messages: Sequence[Tuple[str, str]], use_chat_template: bool = True,
                    system_prompt: str = '', tools: Optional[list] = None,
                    tools_text: str = '') -> List[int]:
    """
    Token ids for a conversation of (role, content) messages, ready for the reply.

    Rendered with the model's chat template when asked (and it has one), with the generation
    prompt after the last message; system_prompt opens it unless its first message is a system
    one of its own. Without a template the contents are joined by blank lines.

    tools: function specs for a template that renders them (its tools argument). tools_text:
    their description for one that cannot, which ends the system turn (system_prompt's or the
    conversation's own), or is the system turn where there is none.
    """
    messages = _with_system_turn(messages, system_prompt, tools_text)
    if not (use_chat_template and getattr(tokenizer, 'chat_template', None)):
        with _ENCODE_LOCK:
            # The tokenizer's own BOS (if it adds one) still comes: split_special_tokens only
            # changes how the text is read.
            return tokenizer.encode('\n\n'.join(content for _, content in messages),
                                    split_special_tokens=True)
    rendered = tokenizer.apply_chat_template(
        [{'role': role, 'content': _placeholder(i)} for i, (role, _) in enumerate(messages)],
        add_generation_prompt=True, tokenize=False, **({'tools': tools} if tools else {}))
    ids: List[int] = []
    with _ENCODE_LOCK:
        for index, (role, content) in enumerate(messages):
            before, text, rendered = _split_at_text(rendered, index, role, content)
            # The template's pieces hold its special tokens (and BOS, if it has one); adding
            # them again would double BOS.
            ids += tokenizer.encode(before, add_special_tokens=False)
            ids += tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)
        return ids + tokenizer.encode(rendered, add_special_tokens=False)


def _split_at_text(rendered: str, index: int, role: str, content: str) -> Tuple[str, str, str]:
    # What the template rendered before message index's text, the text as the template writes
    # it, and what follows. The text is as it is, or a JSON string where the template applies
    # tojson to it (transformers' tojson: json.dumps, non-ASCII kept).
    found = [(form, text) for form, text in
             ((_placeholder(index), content),
              (json.dumps(_placeholder(index)), json.dumps(content, ensure_ascii=False)))
             if form in rendered]
    if len(found) != 1 or rendered.count(found[0][0]) != 1:
        raise EngineError(f'the chat template does not put the text of message {index} '
                          f'({role}) in the prompt exactly once; set use_chat_template '
                          'to false')
    form, text = found[0]
    before, _, after = rendered.partition(form)
    return before, text, after


def encode_truncated(tokenizer, text: str, limit: int, use_chat_template: bool = True,
                     system_prompt: str = '', tools: Optional[list] = None,
                     tools_text: str = '') -> Tuple[List[int], int]:
    """
    Return token ids for one user turn cut to at most limit tokens, and the text tokens cut.

    The beginning of the text is dropped (the oldest part of a long message); the template and
    the system prompt stay whole, so the model still sees a well-formed turn.
    """
    ids = encode_prompt(tokenizer, text, use_chat_template, system_prompt, tools, tools_text)
    if len(ids) <= limit:
        return ids, 0
    body = encode_text(tokenizer, text)
    overhead = len(ids) - len(body)
    keep = limit - overhead
    # Text decoded from a cut token list re-encodes to about as many tokens, not always
    # exactly as many: shrink until the whole prompt fits.
    while keep > 0:
        tail = tokenizer.decode(body[-keep:]).lstrip('\ufffd')
        ids = encode_prompt(tokenizer, tail, use_chat_template, system_prompt, tools,
                            tools_text)
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
        self.incomplete_tokens = 0   # set by flush: tokens with a dropped incomplete character

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
        """
        Return whatever is still held back at the end, less an incomplete last character.

        A reply cut mid-character (by max_new_tokens, a full context or a cancel) would end in
        U+FFFD; that character is dropped, and incomplete_tokens says how many held-back tokens
        it was in.
        """
        held = len(self._ids) - self._read
        done = self._decode(self._ids[self._prefix:self._read])
        text = self._decode(self._ids[self._prefix:])
        self._prefix = self._read = len(self._ids)
        tail = text[len(done):] if len(text) > len(done) else ''
        whole = tail.rstrip('\ufffd')
        self.incomplete_tokens = held if len(whole) < len(tail) else 0
        return whole
