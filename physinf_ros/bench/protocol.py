"""
The paper's measurement protocol, as a loop over cells (mode x context) of fresh sessions.

A session is one fresh decoder from `Engine.renew`: the weights stay loaded (they are not read
from disk again), but the KV cache is new, CUDA graphs are captured anew, and the cache is
filled by a real prefill of ctx random token ids (seeded by the session's index, so every mode
sees the same prompt in the same session slot and the slots rotate inputs). Then `warmup` decode
steps, then `steps` measured ones, each timed with time.perf_counter around decoder.step(),
which returns the chosen token to the host and so waits for the device.

A/B: the modes of one backend family (eager and graphed; hf and hf-graphed) share loaded
weights, and their sessions interleave (slot 0: A then B, slot 1: B then A, ...) so slow drift
of clocks or temperature hits both alike. Modes of another family need the model loaded again;
they run after, one family at a time, so only one copy of the weights is ever in memory.
A mode is a backend name, the transformers ones with a software stack (`hf-graphed:sdpa-cudnn`);
modes whose stacks share weights (attention stacks) are one family, each quantisation stack its
own.

A constrained plan (`output`: a JSON schema) measures each session twice on the same decoder:
free steps, then steps whose choice follows the schema, each timed around the host's grammar
work (advance by the last token, fill the next mask) and decoder.step(), as a constrained reply
pays them; the mask's own time is kept too. A reply that completes its schema starts another
(outside the timed interval); random weights walk the grammar as any tokens would.

A speculative plan (`verify_ks`) also times verify steps in each session, after the free steps
and at the position they reached: for each k, decoder.verify of k arbitrary drafted token ids
(the pending token and them, k + 1 rows, one forward; graphed: its own CUDA graph, captured in
the warm-up), then the greedy choice of every row read on the host (speculative.accept_greedy,
as a verify step's acceptance reads it, so the interval ends when the device has finished), then
decoder.rewind back to the same position, outside the timing, so each repeat verifies the same
positions. The plain step is the protocol's step above: t_verify(k) / t_step is what a verify of
k drafted tokens costs in plain steps, the reply tokens per verify step it must average to pay
off. With a draft model (`draft`), each session also times the draft model's plain steps at the
same context and prompt (its cost per proposed token).

A stack matrix asks for modes that may not run on every machine. With `record_unavailable`, a
mode whose stack cannot run here (package missing, no CUDA) or whose load or session fails is
given to the listener as unavailable with the reason, and the run goes on with the others.
"""

from dataclasses import dataclass, field
import gc
import statistics
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..engine import check_backend, Decoder, Engine, EngineError, load, Sampling
from ..engine.decoders import backends
from ..engine.decoders.stacks import missing
from ..engine.device import pick_device
from ..engine.loading import load_draft
from ..engine.speculative import accept_greedy, check_verifies, MAX_DRAFT
from ..measurement.stats import bootstrap_ratio_ci, percentile
from ..structured import compile_constraint, OutputFormat, Vocabulary

GREEDY = Sampling()
DEFAULT_CONTEXTS = (2048, 4096, 8192, 16384)
DEFAULT_MODES = ('eager', 'graphed')


class Stopped(Exception):
    """The run was asked to stop before it finished."""


@dataclass(frozen=True)
class Plan:
    """What to measure: the model, the modes (backends) and contexts, and the protocol sizes."""

    model: str = 'embedded'
    modes: Tuple[str, ...] = DEFAULT_MODES
    contexts: Tuple[int, ...] = DEFAULT_CONTEXTS
    steps: int = 30
    warmup: int = 5
    sessions: int = 10
    device: str = 'auto'
    dtype: str = 'auto'
    seed: int = 0
    record_unavailable: bool = False   # a mode that cannot run is recorded, not fatal
    output: OutputFormat = OutputFormat()   # constrained steps too, where set
    tokenizer: str = ''   # for a constrained plan on weights without one (synthetic:)
    verify_ks: Tuple[int, ...] = ()   # drafted tokens per timed verify step (none: no verify)
    draft: str = ''   # a draft model whose plain steps are timed too (a speculative plan)
    deterministic: bool = False   # our kernels add in a fixed order (KernelConfig.deterministic)

    def problems(self) -> List[str]:
        """Return why this plan cannot run (empty when it can)."""
        wrong = []
        for mode in self.modes:
            reason = 'auto is not a mode: name the backend' if mode == 'auto' else \
                check_backend(mode)
            if reason:
                wrong.append(f'mode {mode!r} refused: {reason}')
        if not self.modes or len(set(self.modes)) != len(self.modes):
            wrong.append(f'modes must be distinct and at least one; got {list(self.modes)}')
        if not self.contexts or min(self.contexts) < 1:
            wrong.append(f'contexts must be positive token counts; got {list(self.contexts)}')
        if self.output.constrained and self.output.tools.strip():
            wrong.append('a constrained plan takes a JSON schema or a grammar, not tools')
        if any(not 1 <= k <= MAX_DRAFT for k in self.verify_ks) or \
                len(set(self.verify_ks)) != len(self.verify_ks):
            wrong.append(f'verify k must be distinct drafted-token counts from 1 to {MAX_DRAFT}; '
                         f'got {list(self.verify_ks)}')
        if self.draft and not self.verify_ks:
            wrong.append('a draft model is timed only beside verify steps: give verify k')
        if self.steps < 1 or self.warmup < 0 or self.sessions < 1:
            wrong.append(f'need steps >= 1, warmup >= 0 and sessions >= 1; got steps '
                         f'{self.steps}, warmup {self.warmup}, sessions {self.sessions}')
        return wrong

    def unrunnable(self, device) -> Dict[str, str]:
        """Return why modes cannot run on device (a stack's package or CUDA missing), by mode."""
        stacks = {mode: backends.stack_of(mode) for mode in self.modes}
        reasons = {mode: missing(stack, device) for mode, stack in stacks.items() if stack}
        return {mode: reason for mode, reason in reasons.items() if reason}

    @property
    def baseline(self) -> str:
        """Return the mode every other mode is compared with: the first one."""
        return self.modes[0]

    def max_context(self, ctx: int) -> int:
        """KV cache size for a cell: the prompt, every step, and the room step() keeps free."""
        # A speculative plan steps once more (for the pending token) and verifies k + 1 rows.
        verify = max(self.verify_ks) + 2 if self.verify_ks else 0
        return ctx + self.warmup + self.steps + 1 + verify

    def families(self) -> List[Tuple[str, ...]]:
        """Group the modes by the weights they share, in the order they were given."""
        groups: Dict[Tuple[str, ...], List[str]] = {}
        for mode in self.modes:
            groups.setdefault(backends.weights_key(mode), []).append(mode)
        return [tuple(group) for group in groups.values()]

    def session_count(self) -> int:
        return len(self.modes) * len(self.contexts) * self.sessions


@dataclass
class Session:
    """One fresh decoder's measurement."""

    index: int
    prefill_ms: float
    step_ms: List[float]
    constrained_ms: List[float] = field(default_factory=list)   # a constrained plan's steps
    mask_us: List[float] = field(default_factory=list)   # their host grammar work
    verify_ms: Dict[int, List[float]] = field(default_factory=dict)   # by drafted tokens k
    draft_ms: List[float] = field(default_factory=list)   # the draft model's plain steps

    @property
    def median_ms(self) -> float:
        return statistics.median(self.step_ms)


@dataclass
class Comparison:
    """
    A mode against the baseline at one context, over paired session slots.

    speedup = mean of the baseline's session medians / mean of this mode's, with a paired
    bootstrap 95% CI; launch_fraction = 1 - t_graphed / t_eager (the same means), given only
    when this mode really replayed CUDA graphs of the baseline's forward.
    """

    baseline: str
    speedup: float
    ci95_lo: float
    ci95_hi: float
    launch_fraction: Optional[float]


@dataclass
class Cell:
    """One (mode, context) of the plan: its sessions and, for non-baseline modes, the A/B."""

    mode: str
    backend: str          # what ran: a graph mode falls back to eager where there is no CUDA
    ctx: int
    sessions: List[Session] = field(default_factory=list)
    comparison: Optional[Comparison] = None

    @property
    def samples(self) -> List[float]:
        return [ms for s in self.sessions for ms in s.step_ms]

    @property
    def session_medians(self) -> List[float]:
        return [s.median_ms for s in self.sessions]

    def percentile(self, q: float) -> float:
        return percentile(self.samples, q)

    @property
    def constrained_samples(self) -> List[float]:
        return [ms for s in self.sessions for ms in s.constrained_ms]

    @property
    def mask_samples(self) -> List[float]:
        return [us for s in self.sessions for us in s.mask_us]

    @property
    def verify_ks(self) -> List[int]:
        return sorted({k for s in self.sessions for k in s.verify_ms})

    def verify_samples(self, k: int) -> List[float]:
        return [ms for s in self.sessions for ms in s.verify_ms.get(k, [])]

    @property
    def draft_samples(self) -> List[float]:
        return [ms for s in self.sessions for ms in s.draft_ms]


def compare(baseline: Cell, cell: Cell) -> Comparison:
    """Return the A/B of cell against the baseline cell at the same context."""
    speedup, low, high = bootstrap_ratio_ci(baseline.session_medians, cell.session_medians)
    graph_pair = backends.graph_of(cell.backend) == baseline.backend
    return Comparison(baseline.mode, speedup, low, high,
                      1.0 - 1.0 / speedup if graph_pair else None)


class Listener:
    """What a run reports as it goes; the CLI and the node each override what they show."""

    def loaded(self, engine: Engine) -> None:
        """Take a freshly loaded model; this happens once per backend family."""

    def step(self, mode: str, ctx: int, step_ms: float) -> None:
        """Take one measured step's time."""

    def session(self, mode: str, ctx: int, session: Session) -> None:
        """Take a finished session."""

    def cell(self, cell: Cell, engine: Engine) -> None:
        """Take a finished cell: all its sessions, its comparison filled in."""

    def unavailable(self, mode: str, reason: str) -> None:
        """Take a mode that did not run (record_unavailable), with the reason."""


def prompt_ids(vocab_size: int, ctx: int, seed: int, slot: int) -> List[int]:
    """Return ctx random token ids, the same for every mode in the same session slot."""
    return np.random.default_rng([seed, slot]).integers(0, vocab_size, ctx).tolist()


def vocab_size(engine: Engine) -> int:
    """Return the vocabulary size of the loaded model, from its config.json."""
    return engine.source.hf_config['vocab_size']


def timed_session(decoder: Decoder, ids: Sequence[int], plan: Plan,
                  on_step: Callable[[float], None] = lambda _: None,
                  stop: Callable[[], bool] = lambda: False) -> Tuple[float, List[float]]:
    """Prefill ids, take plan.warmup steps, time plan.steps; return (prefill_ms, step_ms list)."""
    # A step is timed on the host around decoder.step() (launch, then wait for its token): the
    # interval a caller of the decoder sees. Scripts that measure as the protocol does call this.
    start = time.perf_counter()
    decoder.prefill(ids, GREEDY)
    prefill_ms = (time.perf_counter() - start) * 1000.0
    for _ in range(plan.warmup):
        decoder.step()
    samples = []
    gc.disable()   # a collection in the middle of a step would be timed as the step
    try:
        for _ in range(plan.steps):
            if stop():
                raise Stopped()
            start = time.perf_counter()
            decoder.step()
            samples.append((time.perf_counter() - start) * 1000.0)
            on_step(samples[-1])
    finally:
        gc.enable()
    return prefill_ms, samples


class _Allowed:
    # What the decoder reads its mask from: the current reply's constraint's bits.
    bits = None


def constrained_session(decoder: Decoder, ids: Sequence[int], plan: Plan,
                        new_constraint: Callable[[], object],
                        stop: Callable[[], bool] = lambda: False
                        ) -> Tuple[List[float], List[float]]:
    """Prefill ids, then time plan.steps constrained steps; return (step_ms, mask_us)."""
    allowed, constraint = _Allowed(), new_constraint()
    allowed.bits = constraint.fill_bitmask()
    token = decoder.prefill(ids, GREEDY, allowed)
    steps, masks = [], []
    gc.disable()
    try:
        for index in range(plan.warmup + plan.steps):
            if stop():
                raise Stopped()
            start = time.perf_counter()
            if constraint.advance(token) and not constraint.finished:
                constraint.fill_bitmask()
            masked = time.perf_counter()
            if constraint.finished or constraint.dead_end:
                # A finished reply: the next one's grammar, compiled outside the timing.
                constraint = new_constraint()
                allowed.bits = constraint.fill_bitmask()
                start = masked = time.perf_counter()
            token = decoder.step()
            if index >= plan.warmup:
                steps.append((time.perf_counter() - start) * 1000.0)
                masks.append((masked - start) * 1e6)
    finally:
        gc.enable()
    return steps, masks


def verify_session(decoder: Decoder, plan: Plan, vocab: int, slot: int,
                   stop: Callable[[], bool] = lambda: False) -> Dict[int, List[float]]:
    """Time plan.steps verify steps per k of plan.verify_ks where decoder stands; ms by k."""
    check_verifies(decoder)
    token = decoder.step()   # the pending token each verify feeds first, and rewinds to
    position = decoder.position
    drafts = prompt_ids(vocab, MAX_DRAFT, plan.seed, slot)   # arbitrary drafted ids
    timed = {}
    for k in plan.verify_ks:
        draft, samples = drafts[:k], []
        # At least one warm-up: a graphed decoder captures the k-token verify at its first use.
        warmup = max(1, plan.warmup)
        gc.disable()
        try:
            for index in range(warmup + plan.steps):
                if stop():
                    raise Stopped()
                start = time.perf_counter()
                accept_greedy(decoder.verify(draft), draft)   # reads the rows: device done
                if index >= warmup:
                    samples.append((time.perf_counter() - start) * 1000.0)
                decoder.rewind(position, token)
        finally:
            gc.enable()
        timed[k] = samples
    return timed


def draft_session(draft: Engine, mode: str, ids: Sequence[int], plan: Plan,
                  stop: Callable[[], bool], log: Callable[[str], None]) -> List[float]:
    """Time the draft model's plain steps on a fresh decoder of its own after prefilling ids."""
    draft.renew(mode, log=log, max_context=plan.max_context(len(ids)))
    return timed_session(draft.decoder, ids, plan, stop=stop)[1]


def run_session(engine: Engine, plan: Plan, mode: str, ctx: int, slot: int,
                on_step: Callable[[float], None], stop: Callable[[], bool],
                log: Callable[[str], None],
                new_constraint: Optional[Callable[[], object]] = None,
                draft: Optional[Engine] = None) -> Tuple[str, Session]:
    """Start a fresh decoder, prefill ctx tokens, warm up, measure; return (backend, session)."""
    if stop():
        raise Stopped()
    engine.renew(mode, log=log, max_context=plan.max_context(ctx))
    decoder = engine.decoder   # local only: the next renew must be able to free this one
    ids = prompt_ids(vocab_size(engine), ctx, plan.seed, slot)
    prefill_ms, samples = timed_session(decoder, ids, plan, on_step, stop)
    session = Session(slot, prefill_ms, samples)
    if plan.verify_ks:
        session.verify_ms = verify_session(decoder, plan, vocab_size(engine), slot, stop)
    if draft is not None:
        session.draft_ms = draft_session(draft, mode, ids, plan, stop, log)
    if new_constraint is not None:
        session.constrained_ms, session.mask_us = constrained_session(
            decoder, ids, plan, new_constraint, stop)
    return decoder.info.backend, session


def constraint_factory(engine: Engine, plan: Plan) -> Optional[Callable[[], object]]:
    """Return what makes a fresh constraint per reply for a constrained plan (else None)."""
    if not plan.output.constrained:
        return None
    # The model's own tokenizer, or plan.tokenizer (synthetic weights have none).
    tokenizer, stop_ids = engine.tokenizer, engine.stop_ids
    if plan.tokenizer:
        from transformers import AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained(plan.tokenizer)
        stop_ids = [tokenizer.eos_token_id]
    if tokenizer is None:
        raise EngineError(f'{plan.model} has no tokenizer for its grammar: give a tokenizer')
    vocabulary = Vocabulary(tokenizer, stop_ids, vocab_size(engine))
    compile_constraint(vocabulary, plan.output)   # a bad schema fails before any session
    return lambda: compile_constraint(vocabulary, plan.output)


def _once(log: Callable[[str], None]) -> Callable[[str], None]:
    # Every session renews the decoder; its notes (fallbacks, graph captures) matter once.
    seen = set()

    def log_once(line: str) -> None:
        if line not in seen:
            seen.add(line)
            log(line)
    return log_once


def run(plan: Plan, listener: Listener = Listener(), stop: Callable[[], bool] = lambda: False,
        log: Callable[[str], None] = lambda _: None) -> List[Cell]:
    """Measure every cell of the plan; raises Stopped (cells so far are given to listener)."""
    problems = plan.problems()
    if problems:
        raise ValueError('; '.join(problems))
    log = _once(log)
    cells: Dict[Tuple[str, int], Cell] = {}
    failed: Dict[str, str] = {}

    def give_up(mode: str, exc: Exception) -> None:
        if not plan.record_unavailable or isinstance(exc, Stopped):
            raise exc
        failed[mode] = str(exc) or type(exc).__name__
        log(f'mode {mode} recorded unavailable: {failed[mode]}')
        listener.unavailable(mode, failed[mode])

    unrunnable = plan.unrunnable(pick_device(plan.device))
    for family in plan.families():
        for mode in family:
            if mode in unrunnable:
                give_up(mode, EngineError(unrunnable[mode]))
        runnable = [mode for mode in family if mode not in failed]
        if not runnable:
            continue
        try:
            engine = load(plan.model, runnable[0], plan.device, plan.dtype,
                          plan.max_context(plan.contexts[0]), log=log,
                          deterministic=plan.deterministic)
        except Exception as exc:   # noqa: B902 - recorded per mode, or raised again
            for mode in runnable:
                give_up(mode, exc)
            continue
        listener.loaded(engine)
        new_constraint = constraint_factory(engine, plan)
        draft = load_draft(plan.draft, engine, log) if plan.draft else None
        for ctx in plan.contexts:
            here = {mode: Cell(mode, mode, ctx) for mode in runnable}
            for slot in range(plan.sessions):
                order = runnable if slot % 2 == 0 else runnable[::-1]
                for mode in order:
                    if mode in failed:
                        continue
                    try:
                        backend, session = run_session(
                            engine, plan, mode, ctx, slot,
                            lambda ms, mode=mode: listener.step(mode, ctx, ms), stop, log,
                            new_constraint, draft)
                    except Exception as exc:   # noqa: B902 - recorded per mode, or raised again
                        give_up(mode, exc)
                        continue
                    here[mode].backend = backend
                    here[mode].sessions.append(session)
                    listener.session(mode, ctx, session)
            for mode in runnable:
                if mode in failed:
                    continue
                cell = cells[mode, ctx] = here[mode]
                if mode != plan.baseline and (plan.baseline, ctx) in cells:
                    cell.comparison = compare(cells[plan.baseline, ctx], cell)
                listener.cell(cell, engine)
        # Free this family's weights before the next family loads its own.
        del engine, draft
        gc.collect()
        _empty_device_cache()
    return [cells[mode, ctx] for mode in plan.modes for ctx in plan.contexts
            if (mode, ctx) in cells]


def _empty_device_cache() -> None:
    import torch
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def parse_list(text: str, kind=str) -> Tuple:
    """Split '2048,4096' or 'eager, graphed' into a tuple of kind."""
    return tuple(kind(item.strip()) for item in text.split(',') if item.strip())


def describe(plan: Plan) -> Dict[str, object]:
    """Return the protocol's settings and definitions, for results files."""
    return {
        'warmup_steps': plan.warmup, 'measured_steps': plan.steps, 'sessions': plan.sessions,
        'contexts': list(plan.contexts), 'modes': list(plan.modes), 'baseline': plan.baseline,
        'seed': plan.seed, 'record_unavailable': plan.record_unavailable,
        'json_schema': plan.output.response_format or None,
        'grammar': plan.output.grammar or None, 'tokenizer': plan.tokenizer or None,
        'session': 'Engine.renew: weights stay loaded; new KV cache, new CUDA graphs, '
                   'a real prefill of ctx random token ids (seeded by session slot)',
        'step_timing': 'time.perf_counter around decoder.step(), which waits for the device',
        'step_ms_p50': 'median of all measured steps of the cell (all sessions)',
        'speedup': 'mean of baseline session medians / mean of mode session medians; '
                   '95% CI: paired percentile bootstrap over session slots, 10000 resamples',
        'launch_fraction': '1 - 1/speedup, for a graph mode against its eager forward',
        'constrained_step': 'a constrained plan: per session, after the free steps, a prefill '
                            'with the grammar, then steps timed around the grammar work '
                            '(advance by the last token, fill the next mask: mask_us) and '
                            'decoder.step(); constrained_ratio_p50 / _p99: constrained step '
                            'p50 / p99 over the free step p50 / p99',
        'verify_ks': list(plan.verify_ks) or None, 'draft_model': plan.draft or None,
        'deterministic_kernels': plan.deterministic,
        'verify_step': 'a speculative plan: per session, after the free steps, one more step '
                       '(the pending token), then per k a warm-up (at least one: the graph '
                       'capture) and measured verify steps of k arbitrary drafted ids, each '
                       'timed around decoder.verify and the greedy choice of its k + 1 rows read '
                       'on the host, then rewound (untimed) to the same position',
        'verify_ratio': 't_verify(k) / t_step: verify p50 over the free step p50 of the cell; '
                        'break_even_tokens_per_step: the same number, the reply tokens a '
                        'verify step of k drafted tokens must average to beat plain steps',
        'draft_break_even': 'with a draft model: (t_verify(k) + k * t_draft) / t_step, t_draft '
                            "the draft model's plain step p50 at the same context",
    }
