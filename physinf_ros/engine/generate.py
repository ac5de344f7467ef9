"""
The generation loop: prefill, then one decode step per token, streamed as it goes.

The loop keeps the device ahead of its caller: steps n+1 and n+2 are launched (Decoder.launch)
before token n is handed out, so the host's work on token n (detokenising, publishing, reading
the next token) runs while the device computes, and the device never waits for the host. The
reply is exactly what a step-by-step loop gives: eos is known only once its step is read, so
the step launched after it is computed and discarded, which delays the next request's prefill
by one step of device time (the caller already has the whole reply); a cancel seen between two
tokens ends the reply before the next one, and the two steps already launched are discarded
the same way. max_new_tokens and a full context are known in advance and
launch nothing extra. Backends that read each token back inside their step (hf, exllamav2, any
CPU) run the plain loop: their launch() defers the step until it is waited for.

A constrained reply (a grammar's Constraint: a JSON schema or a grammar) is advanced by each
token as it is read, and its next mask filled before the next step is launched, so it launches
one step ahead. A grammar that is complete ends the reply as an end of sequence, without a step
for the stop token; one that allows no next token ends it as an error, with the reason.

A speculative reply (a proposer: speculative.py) runs step by step instead: the proposer drafts
up to k tokens from the sequence so far, one verify step keeps 1 to k + 1 of them
(Decoder.speculate), and they are handed out one by one with the same checks between them, each
with its share of the step's time; with no draft, one plain step. A constrained reply does not
speculate (its mask changes with every token).
"""

from collections import deque
from dataclasses import dataclass
import time
from typing import Callable, Deque, Iterator, List, Optional, Sequence, Tuple

from .base import ContextFull, Decoder, LAUNCHED_AHEAD, PendingStep, Sampling
from .text import Detokenizer

FINISH_EOS = 'eos'
FINISH_LENGTH = 'length'
FINISH_CANCELLED = 'cancelled'
FINISH_ERROR = 'error'


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
                 cancelled: Callable[[], bool] = lambda: False, constraint=None,
                 proposer=None):
        self.decoder = decoder
        self.prompt_ids = list(prompt_ids)
        self.max_new_tokens = max_new_tokens
        self.sampling = sampling
        self._stop_ids = stop_ids
        self._detok = Detokenizer(tokenizer) if tokenizer is not None else None
        self._cancelled = cancelled
        # structured.Constraint (or None): refills its bits for the decoder before each step.
        self.constraint = constraint
        self._ahead = 1 if constraint is not None else LAUNCHED_AHEAD
        # speculative.PromptLookup or DraftModel (or None): drafts for Decoder.speculate.
        self.proposer = proposer if constraint is None else None
        self.verify_steps = 0     # steps of this reply that verified a draft
        self.plain_steps = 0      # steps of a speculative reply with no draft
        self.drafted_tokens = 0
        self.accepted_tokens = 0  # drafted tokens the model kept
        self.token_ids: List[int] = []
        self.pieces: List[str] = []
        self.step_ms: List[float] = []
        self.ttft_ms: Optional[float] = None
        self.cached_tokens = 0   # prompt tokens whose keys and values the prefill kept
        self.finish_reason: Optional[str] = None
        self.detail = ''
        self._full: Optional[ContextFull] = None   # why no further step could be launched

    @property
    def text(self) -> str:
        return ''.join(self.pieces)

    @property
    def steps(self) -> int:
        """Decode steps whose tokens were handed out (a verify step counts once)."""
        return self.verify_steps + self.plain_steps if self.proposer else len(self.step_ms)

    @property
    def tokens_per_step(self) -> float:
        """Tokens handed out per decode step run (1 without speculation; the first excluded)."""
        return len(self.step_ms) / self.steps if self.steps > 0 else 0.0

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
        if self.constraint is not None:
            self._follow_grammar(token_id)
        return Piece(token_id, text, step_ms)

    def _follow_grammar(self, token_id: int) -> None:
        # Before the next step is launched: its choice reads the mask filled here.
        constraint = self.constraint
        masked = constraint.allows(token_id)   # the mask this token was chosen under
        if not constraint.advance(token_id):
            self.finish_reason = FINISH_ERROR
            where = f'reply token {len(self.token_ids)} (id {token_id})'
            # Which side failed: a decoder whose choice ignored its mask, or the grammar.
            self.detail = (f'the reply left its grammar at {where}: ' + (
                constraint.dead_end if masked else
                'the decoder chose a token its mask did not allow (a decoder fault)'))
        elif constraint.finished:
            self.finish_reason = FINISH_EOS
            self.detail = 'the reply completed its grammar'
        else:
            self._fill_mask()

    def _fill_mask(self) -> None:
        self.constraint.fill_bitmask()
        if self.constraint.dead_end:
            self.finish_reason = FINISH_ERROR
            self.detail = f'no token can continue the reply: {self.constraint.dead_end}'

    def _launch_ahead(self, ahead: Deque[PendingStep]) -> None:
        # Keep LAUNCHED_AHEAD steps queued, none past max_new_tokens or a full context.
        while (len(ahead) < self._ahead and self._full is None
               and len(self.token_ids) + len(ahead) < self.max_new_tokens):
            try:
                ahead.append(self.decoder.launch())
            except ContextFull as exc:
                self._full = exc

    def _stop_before_next(self) -> bool:
        # The checks, in the order a step-by-step loop makes them after each token.
        if self.finish_reason is not None:
            return True
        if self._cancelled():
            self.finish_reason = FINISH_CANCELLED
            return True
        if len(self.token_ids) >= self.max_new_tokens:
            self.finish_reason = FINISH_LENGTH
            self.detail = f'max_new_tokens ({self.max_new_tokens}) reached'
            if self.constraint is not None:
                self.detail += ' before the reply completed its grammar'
            return True
        return False

    def _overlapped(self, piece: Piece) -> Iterator[Piece]:
        ahead: Deque[PendingStep] = deque()
        while True:
            if self.finish_reason is None:
                self._launch_ahead(ahead)
            yield piece
            if self._stop_before_next():
                break
            try:
                if not ahead:
                    raise self._full
                token, step_ms = ahead.popleft().wait()
            except ContextFull as exc:
                self.finish_reason, self.detail = FINISH_LENGTH, str(exc)
                if self.constraint is not None:
                    self.detail += ' before the reply completed its grammar'
                break
            self.step_ms.append(step_ms)
            piece = self._piece(token, step_ms)

    def _speculative(self, piece: Piece) -> Iterator[Piece]:
        decoder, proposer = self.decoder, self.proposer
        proposer.start(self.prompt_ids, self.sampling)
        queue: Deque[Tuple[int, float]] = deque()
        while True:
            yield piece
            if self._stop_before_next():
                break
            if not queue:
                try:
                    queue.extend(self._speculative_step(decoder, proposer))
                except ContextFull as exc:
                    self.finish_reason, self.detail = FINISH_LENGTH, str(exc)
                    break
            token, step_ms = queue.popleft()
            self.step_ms.append(step_ms)
            piece = self._piece(token, step_ms)

    def _speculative_step(self, decoder: Decoder, proposer) -> List[Tuple[int, float]]:
        # A draft that fits the reply's length and the context, verified; else one step.
        room = decoder.info.max_context - 2 - decoder.position
        k = min(proposer.k, self.max_new_tokens - len(self.token_ids) - 1, room)
        draft = proposer.propose(self.prompt_ids + self.token_ids, k) if k > 0 else []
        start = time.perf_counter()
        if draft:
            tokens = decoder.speculate(draft)
            self.verify_steps += 1
            self.drafted_tokens += len(draft)
            self.accepted_tokens += len(tokens) - 1
        else:
            tokens = [decoder.step()]
            self.plain_steps += 1
        share = (time.perf_counter() - start) * 1000.0 / len(tokens)
        return [(token, share) for token in tokens]

    def __iter__(self) -> Iterator[Piece]:
        start = time.perf_counter()
        if self.constraint is not None:
            self._fill_mask()
            if self.finish_reason is not None:
                return
        token = self.decoder.prefill(self.prompt_ids, self.sampling, self.constraint)
        self.ttft_ms = (time.perf_counter() - start) * 1000.0
        self.cached_tokens = self.decoder.cached_tokens
        piece = self._piece(token, None)
        if self.proposer is not None:
            yield from self._speculative(piece)
        else:
            yield from self._overlapped(piece)
        tail = self._detok.flush() if self._detok else ''
        if self._detok and self._detok.incomplete_tokens:
            dropped = ('an incomplete UTF-8 character was dropped from the end (in the last '
                       f'{self._detok.incomplete_tokens} tokens)')
            self.detail = f'{self.detail}; {dropped}' if self.detail else dropped
        if tail:
            self.pieces.append(tail)
            yield Piece(-1, tail, None)
