"""The generation loop: prefill, then one decode step per token, streamed as it goes."""

from dataclasses import dataclass
import time
from typing import Callable, Iterator, List, Optional, Sequence

from .base import ContextFull, Decoder, Sampling
from .text import Detokenizer

FINISH_EOS = 'eos'
FINISH_LENGTH = 'length'
FINISH_CANCELLED = 'cancelled'


@dataclass(frozen=True)
class Piece:
    """
    One chosen token: its new text ('' while a character is incomplete) and step time.

    step_ms is None for the first token, which comes from the prefill (see ttft_ms).
    """

    token_id: int
    text: str
    step_ms: Optional[float]


class Generation:
    """One request's decode: iterate for pieces; the totals are filled in as it runs."""

    def __init__(self, decoder: Decoder, tokenizer, stop_ids: frozenset,
                 prompt_ids: Sequence[int], max_new_tokens: int, sampling: Sampling,
                 cancelled: Callable[[], bool] = lambda: False):
        self.decoder = decoder
        self.prompt_ids = list(prompt_ids)
        self.max_new_tokens = max_new_tokens
        self.sampling = sampling
        self._stop_ids = stop_ids
        self._detok = Detokenizer(tokenizer) if tokenizer is not None else None
        self._cancelled = cancelled
        self.token_ids: List[int] = []
        self.pieces: List[str] = []
        self.step_ms: List[float] = []
        self.ttft_ms: Optional[float] = None
        self.finish_reason: Optional[str] = None
        self.detail = ''

    @property
    def text(self) -> str:
        return ''.join(self.pieces)

    @property
    def tokens_per_s(self) -> float:
        """Decode rate over the measured steps (prefill excluded)."""
        total = sum(self.step_ms)
        return 1000.0 * len(self.step_ms) / total if total > 0 else 0.0

    def _piece(self, token_id: int, step_ms: Optional[float]) -> Piece:
        if token_id in self._stop_ids:
            self.finish_reason = FINISH_EOS
            if not self.token_ids:
                self.detail = 'end of sequence as the first token: the reply is empty'
            return Piece(token_id, '', step_ms)
        self.token_ids.append(token_id)
        text = self._detok.push(token_id) if self._detok else ''
        if text:
            self.pieces.append(text)
        return Piece(token_id, text, step_ms)

    def __iter__(self) -> Iterator[Piece]:
        start = time.perf_counter()
        token = self.decoder.prefill(self.prompt_ids, self.sampling)
        self.ttft_ms = (time.perf_counter() - start) * 1000.0
        yield self._piece(token, None)
        while self.finish_reason is None:
            if self._cancelled():
                self.finish_reason = FINISH_CANCELLED
            elif len(self.token_ids) >= self.max_new_tokens:
                self.finish_reason = FINISH_LENGTH
                self.detail = f'max_new_tokens ({self.max_new_tokens}) reached'
            else:
                try:
                    start = time.perf_counter()
                    token = self.decoder.step()
                except ContextFull as exc:
                    self.finish_reason, self.detail = FINISH_LENGTH, str(exc)
                    break
                step_ms = (time.perf_counter() - start) * 1000.0
                self.step_ms.append(step_ms)
                yield self._piece(token, step_ms)
        tail = self._detok.flush() if self._detok else ''
        if self._detok and self._detok.incomplete_tokens:
            dropped = ('an incomplete UTF-8 character was dropped from the end (in the last '
                       f'{self._detok.incomplete_tokens} tokens)')
            self.detail = f'{self.detail}; {dropped}' if self.detail else dropped
        if tail:
            self.pieces.append(tail)
            yield Piece(-1, tail, None)
