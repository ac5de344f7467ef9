"""The Decoder protocol: what every backend offers the generation loop."""

from dataclasses import dataclass
import time
from typing import Callable, NamedTuple, Optional, Protocol, Sequence

import numpy
import torch

from .model.config import ModelConfig


class EngineError(RuntimeError):
    """A failure the user can act on; the message says what to do."""


class ContextFull(EngineError):
    """The KV cache has no room for another token."""


def check_prompt(token_ids: Sequence[int], max_context: int) -> None:
    """Refuse a prompt that is empty or leaves no room for a reply in max_context."""
    if not token_ids:
        raise EngineError('empty prompt: nothing to decode from')
    if len(token_ids) >= max_context:
        raise ContextFull(f'prompt of {len(token_ids)} tokens leaves no room in a context '
                          f'of {max_context} tokens')


def reusable_prefix(held: Sequence[int], token_ids: Sequence[int]) -> int:
    """
    Return how many leading tokens of token_ids a cache holding held can keep.

    The longest common prefix, less one when it is the whole prompt: the prefill must run at
    least the last token to choose the first one of the reply.
    """
    limit = min(len(held), len(token_ids) - 1)
    common = 0
    while common < limit and held[common] == token_ids[common]:
        common += 1
    return common


def check_room(position: int, max_context: int) -> None:
    """Refuse a step once prompt plus reply would exceed max_context tokens."""
    if position + 1 >= max_context:
        raise ContextFull(f'context of {max_context} tokens is full')


# The smallest temperature that is sampled; below it (0 included) the choice is greedy.
# float32's smallest normal number, 2**-126 (about 1.18e-38): sampling.py says why.
MIN_TEMPERATURE = torch.finfo(torch.float32).tiny


@dataclass(frozen=True)
class Sampling:
    """How the next token is chosen: temperature below MIN_TEMPERATURE (0) is greedy (argmax)."""

    temperature: float = 0.0
    top_p: float = 1.0
    seed: Optional[int] = None

    @property
    def greedy(self) -> bool:
        # Written so that a NaN temperature is greedy too.
        return not self.temperature >= MIN_TEMPERATURE


@dataclass(frozen=True)
class DecoderInfo:
    """What a loaded decoder is, for logs, diagnostics and results files."""

    backend: str
    device: str
    dtype: str
    model: str
    max_context: int
    note: str = ''


# Steps launched and not yet read while the generation loop's caller holds a token: the one
# whose token is read next, and the one after it, which keeps the device busy from the moment
# that token is ready. A decoder keeps a launched step's result intact that long.
LAUNCHED_AHEAD = 2


class StepResult(NamedTuple):
    """A finished decode step: the chosen token and the step's time in milliseconds."""

    token: int
    step_ms: float


class PendingStep(Protocol):
    """A decode step that has been asked for; wait() returns its StepResult."""

    def wait(self) -> StepResult:
        """Block until the step is done (ContextFull when there was no room for it)."""


class DeferredStep:
    """
    A step that runs only when waited for: the plain loop.

    For backends that gain nothing from launching ahead (on a CPU a step launched early would
    only delay the token before it).
    """

    def __init__(self, step: Callable[[], int]):
        self._step = step

    def wait(self) -> StepResult:
        start = time.perf_counter()
        token = self._step()
        return StepResult(token, (time.perf_counter() - start) * 1000.0)


@dataclass(frozen=True)
class StepFacts:
    """
    What one decode step reads, as its decoder states it: the model's shape and storage widths.

    element_bytes is the width of the 16- or 32-bit tensors; group_size is set when the
    linears are 4-bit GPTQ codes, with zero_bytes per group and output for their zeros;
    quant_method names a quantised format whose bytes are not modelled (EXL2's mixed widths);
    weight_format is a quantisation stack's storage of the linears (WeightFormat, in
    decoders/stacks.py).
    """

    config: ModelConfig
    element_bytes: float
    kv_bytes_per_element: float
    group_size: Optional[int] = None
    zero_bytes: float = 0.0
    quant_method: Optional[str] = None
    weight_format: Optional[object] = None


class AllowedTokens(Protocol):
    """
    The tokens a constrained reply may take next, filled by the generation loop before each step.

    bits: int32 words, bit i of word w set where token 32 w + i is allowed (the layout of
    structured.Constraint's bitmask). A decoder's next choice is one of these tokens.
    """

    bits: numpy.ndarray


class Decoder(Protocol):
    """
    Batch-1 decoding with a KV cache, one token per step.

    The cache keeps the sequence last decoded (its prompt and the reply tokens fed), and a
    prefill computes only the tokens after the longest prefix it shares with that sequence
    (reusable_prefix) while reuse_prefix is true. A backend that cannot keep a prefix prefills
    from position 0 and says so: cached_tokens 0.
    """

    info: DecoderInfo
    device: torch.device
    # Whether the next prefill may keep the cached prefix it shares (the caller sets it).
    reuse_prefix: bool
    # Prompt tokens the last prefill kept from the cache instead of computing them.
    cached_tokens: int

    def step_facts(self) -> StepFacts:
        """Return the model's shape and how its weights and KV cache are stored."""

    @property
    def position(self) -> int:
        """Tokens held in the KV cache."""

    def prefill(self, token_ids: Sequence[int], sampling: Sampling,
                allowed: Optional[AllowedTokens] = None) -> int:
        """
        Run the prompt and return the first chosen token.

        The cache keeps the prefix the prompt shares with the sequence it holds (see the class),
        and cached_tokens says how long it was; the rest of the cache is overwritten.

        allowed: every choice of this reply (the first and each step's) is one of allowed.bits,
        which the caller refills between steps, and launches at most one step ahead.
        """

    def step(self, token: Optional[int] = None) -> int:
        """
        Feed the last chosen token (or `token`, to teacher-force), return the next.

        Raises ContextFull when the context is full.
        """

    def launch(self) -> PendingStep:
        """
        Ask for the next step, fed the last chosen token, and return without waiting for it.

        The generation loop keeps LAUNCHED_AHEAD steps launched on devices that run
        asynchronously, so the host's work for token n overlaps the device's next steps. At most
        LAUNCHED_AHEAD launched steps are unread at once; one never waited for is discarded.
        """

    def last_logits(self) -> torch.Tensor:
        """Float32 logits [vocab] from which the last token was chosen."""
