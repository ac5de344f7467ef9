"""
Prompt admission, free of rclpy: what a prompt must be before it is tokenised and queued.

The checks run in the order of their cost, so a hostile payload is turned away before any
tokenizer work: the byte size first, then invalid text, then control characters, then
emptiness. What arrives over ROS 2 as a std_msgs/String is already a Python str: rclpy decodes
the wire bytes as UTF-8 with errors replaced by U+FFFD and stops at the first NUL byte, so
invalid UTF-8 from a sender shows up here as U+FFFD, and a NUL never arrives (the sender's
string is cut there). Direct callers can still pass NULs and lone surrogates; both are refused.

Prompts are data only: nothing here, and nothing downstream, executes them or opens them as
paths. They go to the tokenizer and nowhere else.
"""

from dataclasses import dataclass
import re
from typing import Optional

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
    if size > max_prompt_bytes:
        return Admission('', size, reason=(
            f'prompt is {size} bytes; max_prompt_bytes is {max_prompt_bytes}: shorten it or '
            'raise max_prompt_bytes'))
    bad = _INVALID.search(text)
    if bad:
        return Admission('', size, reason=(
            f'prompt is not valid text: {_describe(bad.group())} at character {bad.start()}; '
            'send UTF-8 text'))
    clean, removed = _CONTROL.subn('', text)
    if not clean.strip():
        what = f'only {removed} control characters' if removed else 'empty or only whitespace'
        return Admission('', size, removed, f'empty prompt ({what}): send some text to answer')
    return Admission(clean, size, removed)


def _describe(char: str) -> str:
    if char == '\x00':
        return 'a NUL character'
    if char == '\ufffd':
        return 'U+FFFD (invalid UTF-8 from the sender)'
    return f'a lone surrogate U+{ord(char):04X}'


def too_long(prompt_tokens: int, max_context: int) -> str:
    """Reason for refusing a prompt that leaves no room for a reply."""
    return (f'prompt is {prompt_tokens} tokens; max_context is {max_context}, which leaves no '
            'room for a reply: shorten the prompt, or set truncate_prompt to keep its end')


def truncation_limit(max_context: int, max_new_tokens: int) -> int:
    """
    Return the prompt tokens kept when truncate_prompt cuts a prompt that does not fit.

    The reply keeps room for max_new_tokens, but never more than half the context, so a
    truncated prompt always keeps at least half of it.
    """
    return max_context - min(max_new_tokens, max_context // 2)
