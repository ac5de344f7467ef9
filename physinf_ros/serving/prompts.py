"""
Prompt admission, free of rclpy: what a prompt must be before it is tokenised and queued.

The checks run in the order of their cost, so a hostile payload is turned away before any
tokenizer work: the byte size first, then invalid text, then control characters, then
emptiness. What arrives over ROS 2 as a std_msgs/String is already a Python str: rclpy decodes
the wire bytes as UTF-8 with errors replaced by U+FFFD and stops at the first NUL byte, so
invalid UTF-8 from a sender shows up here as U+FFFD, and a NUL never arrives (the sender's
string is cut there). Direct callers can still pass NULs and lone surrogates; both are refused.

A prompt of only whitespace and invisible format characters (Unicode category Cf: zero-width
spaces, byte-order marks, direction marks) is empty. Format characters inside text stay: they
join emoji and shape scripts.

system_prompt, a node parameter put before every prompt, meets the same checks (the prompt's
max_prompt_bytes, invalid text, controls) but is refused, not cleaned, when it holds control
characters: a parameter is what its setter sent, and a silent edit would hide their mistake.
Empty is fine (the template's default system turn); only whitespace or format characters is not.

A conversation (the Generate goal's messages) is admitted message by message as a prompt is,
its size counted over all of its text; an assistant message may be empty (a reply that ended at
once). Its roles are checked: system, user, assistant or tool, a system message only first, and
the last one user or tool, since the reply that follows is the assistant's.

Prompts are data only: nothing here, and nothing downstream, executes them or opens them as
paths. They go to the tokenizer and nowhere else.
"""

from dataclasses import dataclass
import re
from typing import Optional, Sequence, Tuple
import unicodedata

ROLES = ('system', 'user', 'assistant', 'tool')

# Text that cannot be a prompt: NUL, lone UTF-16 surrogates, and U+FFFD, which is what rclpy
# makes of invalid UTF-8 on the wire.
_INVALID = re.compile('[\x00\ud800-\udfff\ufffd]')
# Control characters (Unicode category Cc) other than tab, newline and carriage return: terminal
# escapes, bells, backspaces. They carry no meaning for a language model and can garble logs,
# so they are removed and the removal is reported.
_CONTROL = re.compile('[\x01-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]')


@dataclass(frozen=True)
class Admission:
    """The outcome of checking one prompt: the text to tokenise, or why it is refused."""

    text: str
    prompt_bytes: int
    removed_controls: int = 0
    reason: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.reason is None


def admit(text: str, max_prompt_bytes: int) -> Admission:
    """Check a prompt before tokenising it; control characters come out, bad text is refused."""
    size = len(text.encode('utf-8', 'surrogatepass'))
    reason = _size_or_invalid('prompt', text, size, max_prompt_bytes)
    if reason:
        return Admission('', size, reason=reason)
    clean, removed = _CONTROL.subn('', text)
    if _blank(clean):
        what = f'only {removed} control characters' if removed else _blank_kind(clean)
        return Admission('', size, removed, f'empty prompt ({what}): send some text to answer')
    return Admission(clean, size, removed)


@dataclass(frozen=True)
class Conversation:
    """The outcome of checking a conversation: its (role, text) messages, or why it is refused."""

    messages: Tuple[Tuple[str, str], ...]
    prompt_bytes: int
    removed_controls: int = 0
    reason: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.reason is None


def admit_messages(messages: Sequence[Tuple[str, str]], max_prompt_bytes: int) -> Conversation:
    """Check a conversation of (role, content) messages before tokenising any of it."""
    size = sum(len(content.encode('utf-8', 'surrogatepass')) for _, content in messages)

    def refuse(reason: str) -> Conversation:
        return Conversation((), size, reason=reason)
    if not messages:
        return refuse('empty conversation: send at least one user message')
    if size > max_prompt_bytes:
        return refuse(f'conversation is {size} bytes of text; max_prompt_bytes is '
                      f'{max_prompt_bytes}: drop its oldest turns or raise max_prompt_bytes')
    kept, removed = [], 0
    for index, (role, content) in enumerate(messages):
        where = f'message {index} ({role!r})'
        if role not in ROLES:
            return refuse(f'{where} has no known role: use one of {", ".join(ROLES)}')
        if role == 'system' and index:
            return refuse(f'{where}: a system message may only be the first')
        bad = _INVALID.search(content)
        if bad:
            return refuse(f'{where} is not valid text: {_describe(bad.group())} at character '
                          f'{bad.start()}; send UTF-8 text')
        clean, count = _CONTROL.subn('', content)
        removed += count
        if _blank(clean) and not (role == 'assistant' and not content):
            what = f'only {count} control characters' if count else _blank_kind(clean)
            return refuse(f'{where} is empty ({what}): send some text')
        kept.append((role, clean))
    if kept[-1][0] not in ('user', 'tool'):
        return refuse(f'the last message is {kept[-1][0]!r}: a conversation to answer ends '
                      'with a user or tool message')
    return Conversation(tuple(kept), size, removed)


def check_system_prompt(text: str, max_prompt_bytes: int) -> Optional[str]:
    """Why text cannot be the system_prompt parameter, or None; '' (the default) is fine."""
    size = len(text.encode('utf-8', 'surrogatepass'))
    reason = _size_or_invalid('system_prompt', text, size, max_prompt_bytes)
    if reason:
        return reason
    controls = _CONTROL.findall(text)
    if controls:
        first = _CONTROL.search(text)
        return (f'system_prompt holds {len(controls)} control characters (the first, '
                f'U+{ord(first.group()):04X}, at character {first.start()}): remove them; tab, '
                'newline and carriage return are fine')
    if text and _blank(text):
        return (f'system_prompt is {_blank_kind(text)}: set it to an empty string for the '
                "chat template's default system turn")
    return None


def _size_or_invalid(name: str, text: str, size: int, max_prompt_bytes: int) -> Optional[str]:
    # Size before anything that reads the text: a 2 MB payload costs a length.
    if size > max_prompt_bytes:
        return (f'{name} is {size} bytes; max_prompt_bytes is {max_prompt_bytes}: shorten it '
                'or raise max_prompt_bytes')
    bad = _INVALID.search(text)
    if bad:
        return (f'{name} is not valid text: {_describe(bad.group())} at character '
                f'{bad.start()}; send UTF-8 text')
    return None


def _blank(text: str) -> bool:
    # Stops at the first visible character, so a real prompt costs a character or two.
    return all(c.isspace() or unicodedata.category(c) == 'Cf' for c in text)


def _blank_kind(text: str) -> str:
    if any(unicodedata.category(c) == 'Cf' for c in text):
        return 'only whitespace and invisible format characters such as U+200B or U+FEFF'
    return 'empty or only whitespace'


def _describe(char: str) -> str:
    if char == '\x00':
        return 'a NUL character'
    if char == '\ufffd':
        return 'U+FFFD (invalid UTF-8 from the sender)'
    return f'a lone surrogate U+{ord(char):04X}'


def unsendable(text: str) -> Optional[str]:
    """
    Why text cannot be sent as a prompt over ROS 2, or None: a NUL.

    The C string conversion below rclpy ends a string at its first NUL on the sender's side, so
    the decoder would get, accept and answer only the text before it and could not tell. A
    client refuses such a prompt before sending it.
    """
    at = text.find('\x00')
    if at < 0:
        return None
    return (f'prompt holds a NUL character at character {at}: ROS 2 strings end at a NUL, so '
            f'the decoder would get only the {at} characters before it; remove it')


def conversation_too_long(prompt_tokens: int, max_context: int) -> str:
    """Reason for refusing a conversation that leaves no room for a reply."""
    return (f'conversation is {prompt_tokens} tokens; max_context is {max_context}, which '
            'leaves no room for a reply: drop its oldest turns (or raise max_context)')


def too_long(prompt_tokens: int, max_context: int, system_tokens: int = 0) -> str:
    """
    Reason for refusing a prompt that leaves no room for a reply.

    system_tokens: how many of prompt_tokens the system prompt took (Engine.system_tokens), so
    that the reason blames the right text.
    """
    counts = f'prompt is {prompt_tokens} tokens'
    if system_tokens:
        counts += f', {system_tokens} of them system_prompt'
    counts += f'; max_context is {max_context}, which leaves no room for a reply'
    if system_tokens >= max_context // 2:
        # truncate_prompt may leave a prompt only half the context (the rest is the reply's);
        # a system prompt that takes that half does not fit, whatever of the text is cut.
        return f'{counts}: shorten system_prompt or raise max_context'
    also = ' (or system_prompt)' if system_tokens else ''
    return f'{counts}: shorten the prompt{also}, or set truncate_prompt to keep its end'


def truncation_limit(max_context: int, max_new_tokens: int) -> int:
    """
    Return the prompt tokens kept when truncate_prompt cuts a prompt that does not fit.

    The reply keeps room for max_new_tokens, but never more than half the context, so a
    truncated prompt always keeps at least half of it.
    """
    return max_context - min(max_new_tokens, max_context // 2)
