"""
Backends `eager` and `graphed`: our own forward (model/families.py) with a static KV cache.

`eager` launches the decode step op by op. `graphed` captures the whole step (every layer, the
final norm, the lm_head and the next-token choice) once into a CUDA graph and replays it: the
token and position live in device tensors that the graph itself advances, so a step costs one
replay, whose last kernel writes the chosen token into pinned host memory.

On CUDA (graphed or eager) a step is launched without waiting for it: its last kernel writes
its token into a pinned host row, which the host reads as it lands (an event after the step is
the fallback), so the generation loop can queue step n+1 before it hands token n to its caller
and the device never waits for the host's publishing. A step also times itself: its first
kernel stamps the GPU's clock, and its last writes the nanoseconds since then beside the token.
No timing event sits in or before the graph and no copy after it; each cost the synchronous step
3-35 us (docs/PERF.md, v23, v26 and v27).

A constrained reply (a JSON schema or grammar: AllowedTokens) launches one step ahead, not two
(the mask for step n+1 needs token n), as two graphs: the forward (layers and lm_head), which
needs no mask, and the choice, which reads the grammar's bitmask from a device buffer the host
copies the next mask into. Step n+1's forward is queued right behind step n's choice, so the
device runs it while the host reads token n and computes the next mask: the mask costs the step
only what it takes beyond a forward. A reply's last queued forward is discarded with it.

KV reuse: the cache keeps the sequence last decoded, and a prefill runs only the tokens after
the prefix it shares with the next prompt, from that position on in the same static cache (the
graphs read the position from the device, so they are unchanged). The held sequence grows by a
step's fed token only when the host reads that step: a step launched ahead and discarded (eos,
cancel) may have written the key and value of one more position, which the next prefill then
overwrites.

Context policy: graphs per sampling mode (greedy, sampled; free or constrained), captured for
max_context. The
attention kernel reads the filled length from the device position, so the graph reads only
the filled part of the cache at every length: no buckets, no padding to the maximum.
"""

from dataclasses import replace
import gc
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy
import torch

from ..base import (AllowedTokens, check_prompt, check_room, ContextFull, DecoderInfo,
                    DeferredStep, EngineError, LAUNCHED_AHEAD, PendingStep, reusable_prefix,
                    Sampling, StepResult)
from ..kernels import ops_torch
from ..kernels.config import KernelConfig
from ..kernels.rows import RowOps
from ..model import families
from ..model.llama import KVCache, Weights
from ..sampling import choose, make_generator, mask_logits, sample
from ..speculative import accept_greedy, accept_sampled, MAX_DRAFT


# Prompt lengths (new tokens) whose prefill runs as a captured forward over that many rows: a
# prompt pads to the first that holds it. Longer prompts run op by op, where their compute
# outweighs the launches (docs/PERF.md, v85).
PREFILL_ROWS = (16, 32, 64, 128)
# A pinned reply row's fields (token, step time in ns) before the step writes them.
_UNWRITTEN = -1
# Reads of a reply row between looks at the step's event, which end a wait on a row that was
# never written (a step that wrote no reply) instead of spinning on it forever.
_READS_PER_QUERY = 1024


class _DeviceStep:
    """A step queued on the device: its token and time land in a pinned row, then its event."""

    def __init__(self, row: numpy.ndarray, done: torch.cuda.Event,
                 on_read: Callable[[int], None]):
        self._row, self._done, self._on_read = row, done, on_read
        self._result: Optional[StepResult] = None

    def wait(self) -> StepResult:
        # The row is read as the step's last kernel writes it over PCIe, before that kernel ends
        # and the event after it completes: 2-11 us sooner than Event.synchronize() on a
        # synchronous step (docs/PERF.md at v35, commit 1c4c6a0). Each field is one 8-byte write,
        # so once neither holds _UNWRITTEN both hold the step's values.
        if self._result is None:
            row, reads = self._row, 0
            while row[0] == _UNWRITTEN or row[1] == _UNWRITTEN:
                reads += 1
                if reads % _READS_PER_QUERY == 0 and self._done.query() and (
                        row[0] == _UNWRITTEN or row[1] == _UNWRITTEN):
                    raise EngineError('a decode step ended without writing its reply row')
            self._result = StepResult(int(row[0]), int(row[1]) / 1e6)
            row[:] = _UNWRITTEN   # ready for the step LAUNCHED_AHEAD positions on
            self._on_read(self._result.token)
        return self._result

    @property
    def waited(self) -> bool:
        return self._result is not None


class NativeDecoder:
    """The Decoder protocol on our forward; graphed=True replays a captured step."""

    def __init__(self, weights: Weights, info: DecoderInfo, device: torch.device,
                 graphed: bool, log: Callable[[str], None] = lambda _: None,
                 kernel_config: Optional[KernelConfig] = None):
        config = weights.config
        self.info = info
        self.device = device
        self.weights = weights
        self.step_facts = weights.step_facts   # what a step reads is what the weights hold
        self.log = log
        self.family = families.module(config)
        self.cache = KVCache.allocate(config, info.max_context, device, weights.dtype)
        self.cos, self.sin = self.family.rope_tables(config, info.max_context, device)
        if device.type == 'cuda':
            # The kernels run as configured (kernels.yaml's entry for this GPU unless given).
            from ..kernels.ops_triton import KernelOps   # imports triton: CUDA runs only
            self.ops = KernelOps(kernel_config or KernelConfig.for_device(device, log))
            if weights.step_facts().group_size:   # a 4-bit model: say which kernel streams it
                log(self.ops.config.q4_kernel_note(device))
            log(self.ops.config.attention_kernel_note(config.num_kv_heads, config.head_dim,
                                                      device, bool(config.sliding_layers)))
        else:
            self.ops = ops_torch
        self.graphed = graphed and device.type == 'cuda'
        # Step state on the device: the last chosen token and its position.
        self.token = torch.zeros(1, dtype=torch.long, device=device)
        self.pos = torch.zeros(1, dtype=torch.int32, device=device)
        self.logits = torch.zeros(config.vocab_size, dtype=torch.float32, device=device)
        self.temperature = torch.ones((), dtype=torch.float32, device=device)
        self.top_p = torch.ones((), dtype=torch.float32, device=device)
        self.race = torch.ones(config.vocab_size, dtype=torch.float32, device=device)
        # A constrained reply's allowed tokens (sampling.mask_logits' bits), refilled from a
        # pinned copy before each step.
        words = (config.vocab_size + 31) // 32
        self.allowed_bits = torch.zeros(words, dtype=torch.int32, device=device)
        self._allowed_host = torch.zeros(words, dtype=torch.int32,
                                         pin_memory=device.type == 'cuda')
        self._allowed: Optional[AllowedTokens] = None
        # A constrained step's forward needs no mask: on CUDA the next one is queued behind each
        # choice, so it runs while the host computes the next mask, and the mask's time is
        # hidden up to a forward's (on a CPU, which computes as it launches, nothing would run).
        self.mask_overlap = device.type == 'cuda'
        self._forward_queued = False   # the forward of the step at _position is queued
        # A verify step's drafted tokens (after the pending one) and its rows' logits; made at
        # the first verify.
        self._verify: Optional[Dict[str, torch.Tensor]] = None
        # A short prompt's rows (PREFILL_ROWS) run through the family's decode_layers over rows
        # (RowOps), captured per row count where graphed: a prefill then costs its weight
        # reads, not hundreds of launches from the host.
        self.prefill_rows = PREFILL_ROWS if self.graphed else ()
        most = max(PREFILL_ROWS)
        self._rows_prefill = {
            # [ids of the rows..., start, last row], in one copy from the host
            'args': torch.zeros(most + 2, dtype=torch.long, device=device),
            'host': torch.zeros(most + 2, dtype=torch.long, pin_memory=device.type == 'cuda')}
        # Position offsets 0, 1, ... of a forward's rows (a verify step's, a prefill's).
        self._row_offsets = torch.arange(max(MAX_DRAFT + 1, *PREFILL_ROWS), dtype=torch.int32,
                                         device=device)
        self._position = 0
        self._started = False
        self.reuse_prefix = True
        self.cached_tokens = 0
        # The tokens whose keys and values the cache holds, as far as the host has read them,
        # the token the next step feeds (None once that is unknown), and a count of prefills
        # that tells a step of an earlier reply from one of this reply.
        self._held: List[int] = []
        self._feeds: Optional[int] = None
        self._reply = 0
        self._sampling = Sampling()
        self._generator: Optional[torch.Generator] = None
        self._graphs: Dict[object, torch.cuda.CUDAGraph] = {}
        self._pool = None
        # A step's reply, written by its last kernel: row position % LAUNCHED_AHEAD holds its
        # token and device time (ns). A launched step's row and event stay intact until
        # LAUNCHED_AHEAD more are launched, by which time the loop has read them. Pinned on
        # CUDA, where the device writes it.
        self._host_out = torch.full((LAUNCHED_AHEAD, 2), _UNWRITTEN, dtype=torch.long,
                                    pin_memory=device.type == 'cuda')
        if device.type == 'cuda':
            self._rows = [row.numpy() for row in self._host_out]   # read without tensor ops
            # the last step launched into each row
            self._in_row: List[Optional[_DeviceStep]] = [None] * LAUNCHED_AHEAD
            self._done = [torch.cuda.Event() for _ in range(LAUNCHED_AHEAD)]
            self._warm_up()

    @property
    def position(self) -> int:
        return self._position

    @torch.inference_mode()
    def _body(self, greedy: bool) -> None:
        # A free step as captured: everything on the device, nothing read back.
        if greedy:
            w = self.weights
            x = self.family.decode_layers(w, self.cache, self.token, self.pos, self.cos,
                                          self.sin, self.ops)
            self.ops.greedy_head(x, w.norm, w.lm_head, w.config.rms_norm_eps, self.logits,
                                 self.token, self.pos, self._host_out)
            return
        self._forward_body()
        self._choice_body(greedy=False, constrained=False)

    @torch.inference_mode()
    def _forward_body(self) -> None:
        # A step's first part, which needs no mask: every layer and the lm_head into logits.
        w = self.weights
        x = self.family.decode_layers(w, self.cache, self.token, self.pos, self.cos, self.sin,
                                      self.ops)
        self.ops.rms_matvec(x, w.norm, w.lm_head, None, w.config.rms_norm_eps, out=self.logits)

    @torch.inference_mode()
    def _choice_body(self, greedy: bool, constrained: bool) -> None:
        # A step's second part: the (masked) choice from logits, its reply row, the position.
        # A free greedy step never comes here: it ends in greedy_head (_body).
        if greedy:
            self.ops.masked_greedy_end(self.logits, self.allowed_bits, self.token, self.pos,
                                       self._host_out)
            return
        logits = mask_logits(self.logits, self.allowed_bits) if constrained else self.logits
        self.token.copy_(sample(logits, self.temperature, self.top_p, race=self.race))
        self.ops.step_end(self.token, self.pos, self._host_out)
        self.pos.add_(1)

    def _warm_up(self) -> None:
        # Compile the kernels and capture the greedy step's graph and every short prompt's now
        # rather than in the first replies: a capture costs a quarter to half a second, which
        # a request would otherwise pay as TTFT at each row count's first use (PERF.md, time
        # to first token). The captures fill cache positions 0.. with the keys of token 0,
        # which no held prefix claims.
        if not self.graphed:
            self._body(greedy=True)
            return
        try:
            self._graph(greedy=True)
            for rows in self.prefill_rows:
                if self._rows_fit(0, rows):
                    self._prefill_graph(rows)
        except torch.cuda.OutOfMemoryError as exc:
            self._graphs.clear()
            self._pool = None
            torch.cuda.empty_cache()
            self.graphed = False
            note = f'CUDA graph capture ran out of memory ({exc}); decoding eager instead'
            self.log('warning: ' + note)
            self.info = replace(self.info, backend='eager', note=note)
            self._body(greedy=True)

    def _graph(self, greedy: bool) -> torch.cuda.CUDAGraph:
        return self._captured(greedy, lambda: self._body(greedy),
                              f'{"greedy" if greedy else "sampling"} decode step')

    def _parts(self, greedy: bool) -> Tuple[torch.cuda.CUDAGraph, torch.cuda.CUDAGraph]:
        # A constrained step's two graphs: the forward, then the masked choice.
        kind = 'greedy' if greedy else 'sampling'
        return (self._captured('forward', self._forward_body, 'decode step forward'),
                self._captured(('choice', greedy), lambda: self._choice_body(greedy, True),
                               f'{kind} constrained choice'))

    def _captured(self, key, body: Callable[[], None], what: str) -> torch.cuda.CUDAGraph:
        # The graph of body, captured at its first use with the step state left as it was.
        graph = self._graphs.get(key)
        if graph is not None:
            return graph
        saved = self.token.clone(), self.pos.clone()
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(2):  # compile kernels and settle the allocator outside the capture
                body()
        torch.cuda.current_stream(self.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        # No garbage collection inside the capture: a collected decoder's graphs, destroyed
        # while this stream captures, would end the capture with an error.
        gc.collect()
        collecting = gc.isenabled()
        gc.disable()
        try:
            with torch.cuda.graph(graph, pool=self._pool):
                body()
        finally:
            if collecting:
                gc.enable()
        self._pool = graph.pool()
        self.token.copy_(saved[0])
        self.pos.copy_(saved[1])
        self._graphs[key] = graph
        self.log(f'captured the {what} in a CUDA graph')
        return graph

    @torch.inference_mode()
    def prefill(self, token_ids: Sequence[int], sampling: Sampling,
                allowed: Optional[AllowedTokens] = None) -> int:
        check_prompt(token_ids, self.info.max_context)
        self._sampling = sampling
        self._allowed = allowed
        self._generator = make_generator(sampling, self.device)
        if not sampling.greedy:
            self.temperature.fill_(sampling.temperature)
            self.top_p.fill_(sampling.top_p)
        if self.graphed and allowed is not None:
            self._parts(sampling.greedy)
        elif self.graphed and not sampling.greedy:
            self._graph(greedy=False)
        self._forward_queued = False
        reuse = self.reuse_prefix and self.family.REUSES_PREFIX
        keep = reusable_prefix(self._held, token_ids) if reuse else 0
        # Until the prompt is in, the cache holds only the kept prefix.
        self._held, self._feeds, self._reply = list(token_ids[:keep]), None, self._reply + 1
        self._started = False
        new = list(token_ids[keep:])
        rows = next((rows for rows in self.prefill_rows if len(new) <= rows), 0)
        if rows and self._rows_fit(keep, rows):
            self._prefill_rows(new, keep, rows)
        else:
            ids = torch.tensor(new, dtype=torch.long, device=self.device)
            self.logits.copy_(families.prefill(self.family, self.weights, self.cache, ids,
                                               self.cos, self.sin, start=keep,
                                               ops=self.ops.prompt))
        logits = self.logits
        if allowed is not None:
            logits = mask_logits(logits, self._load_allowed())
        first = choose(logits, sampling, self._generator)
        self.token.copy_(first.view(1))
        self.pos.fill_(len(token_ids))
        self._position = len(token_ids)
        self._started = True
        self._held, self._feeds = list(token_ids), int(first)
        self.cached_tokens = keep
        return int(first)

    def _rows_fit(self, start: int, rows: int) -> bool:
        # Whether a prompt's rows padded to rows, from position start, can run over rows. Rows
        # take each position's keys as a step would, which is what a family that reuses
        # prefixes computes in a prompt too (Phi-3's longrope does not: its table follows the
        # prompt's whole length); the padding's positions must lie in the cache.
        return self.family.REUSES_PREFIX and start + rows <= self.info.max_context

    def _prefill_rows(self, new: List[int], start: int, rows: int) -> None:
        # The prompt's new tokens padded to rows, at positions start..: the padding's keys and
        # values land past the prompt, where the reply's steps overwrite them before any read.
        p = self._rows_prefill
        # The last prefill's copy out of host is done: its logits were read on the host.
        p['host'][:rows + 2] = torch.tensor(new + [0] * (rows - len(new)) + [start, len(new) - 1])
        p['args'][:rows + 2].copy_(p['host'][:rows + 2], non_blocking=True)
        if self.graphed:
            self._prefill_graph(rows).replay()
        else:
            self._prefill_rows_body(rows)

    def _prefill_graph(self, rows: int) -> torch.cuda.CUDAGraph:
        return self._captured(('prefill', rows), lambda: self._prefill_rows_body(rows),
                              f'{rows}-row prefill')

    @torch.inference_mode()
    def _prefill_rows_body(self, rows: int) -> None:
        w, p = self.weights, self._rows_prefill
        ids, start, last = p['args'][:rows], p['args'][rows:rows + 1], p['args'][rows + 1:rows + 2]
        x = self.family.decode_layers(w, self.cache, ids, start.int() + self._row_offsets[:rows],
                                      self.cos, self.sin, RowOps(self.ops))
        # Only the last prompt token's logits are wanted: one row through the step's lm_head.
        self.ops.rms_matvec(x.index_select(0, last)[0], w.norm, w.lm_head, None,
                            w.config.rms_norm_eps, out=self.logits)

    def step(self, token: Optional[int] = None) -> int:
        self._need_prefill()
        if token is not None:
            self.token.fill_(token)   # teacher forcing: one small copy before the step
            self._feeds = token
            self._forward_queued = False   # a queued forward read the token replaced here
        return self.launch().wait().token

    def launch(self) -> PendingStep:
        self._need_prefill()
        if self.device.type != 'cuda':
            return DeferredStep(self._run_step)   # a CPU computes as it launches
        check_room(self._position, self.info.max_context)
        index = self._position % LAUNCHED_AHEAD   # the row the step's kernels write
        row, done, last = self._rows[index], self._done[index], self._in_row[index]
        if (last is not None and not last.waited) or row[0] != _UNWRITTEN \
                or row[1] != _UNWRITTEN:
            # A step dropped in flight, or the warm-up's, may still write this row: let it
            # finish (its event, not yet recorded again) before the row is cleared for this one.
            done.synchronize()
            row[:] = _UNWRITTEN
        on_read = self._on_read(self._position)
        self._enqueue_step()
        done.record()
        step = self._in_row[index] = _DeviceStep(row, done, on_read)
        return step

    def _on_read(self, position: int) -> Callable[[int], None]:
        # What a step at position does once the host reads its token: the cache is now known
        # to hold the token it fed there, and that token feeds the next step.
        reply = self._reply

        def read(token: int) -> None:
            if reply == self._reply and self._feeds is not None \
                    and position == len(self._held):
                self._held.append(self._feeds)
                self._feeds = token
            elif reply == self._reply:
                self._feeds = None   # read out of order: stop extending the held sequence
        return read

    def _need_prefill(self) -> None:
        if not self._started:
            raise EngineError('step() before prefill()')

    def _run_step(self) -> int:
        check_room(self._position, self.info.max_context)
        on_read = self._on_read(self._position)
        self._enqueue_step()
        token = int(self.token)
        on_read(token)
        return token

    def _load_allowed(self) -> torch.Tensor:
        # The caller refilled the bits since the last step; that step's copy out of the pinned
        # buffer is done (it was waited for: one step ahead).
        self._allowed_host.numpy()[:] = self._allowed.bits
        return self.allowed_bits.copy_(self._allowed_host, non_blocking=True)

    def _enqueue_step(self) -> None:
        greedy = self._sampling.greedy
        constrained = self._allowed is not None
        if not greedy:
            # The request's noise, drawn outside the graph so its seed holds (one launch).
            self.race.exponential_(generator=self._generator)
        if constrained:
            self._constrained_step(greedy)
        elif self.graphed:
            self._graph(greedy).replay()
        else:
            self._body(greedy)
        self._position += 1

    def _constrained_step(self, greedy: bool) -> None:
        # This step's forward was queued behind the last choice (mask_overlap) and ran while
        # the host computed this step's mask, so the step waits only for the mask's copy.
        if self.graphed:
            forward, choice = (graph.replay for graph in self._parts(greedy))
        else:
            forward, choice = self._forward_body, lambda: self._choice_body(greedy, True)
        if not self._forward_queued:
            forward()
        self._load_allowed()
        choice()
        # The next step's forward, where the context has room for it (check_room).
        self._forward_queued = self.mask_overlap and self._position + 2 < self.info.max_context
        if self._forward_queued:
            forward()

    @torch.inference_mode()
    def _verify_body(self, rows: int) -> None:
        # The pending token and rows - 1 drafted ones at consecutive positions, one forward.
        w, v = self.weights, self._verify
        ops = RowOps(self.ops)
        ids = torch.cat([self.token, v['draft'][:rows - 1]])
        x = self.family.decode_layers(w, self.cache, ids, self.pos + self._row_offsets[:rows],
                                      self.cos, self.sin, ops)
        ops.rms_matvec(x, w.norm, w.lm_head, None, w.config.rms_norm_eps,
                       out=v['logits'][:rows])

    @torch.inference_mode()
    def verify(self, draft: Sequence[int]) -> torch.Tensor:
        """
        Run the pending token and draft [k] at the next k + 1 positions in one step.

        Returns float32 logits [k + 1, vocab] (row i: the choice after the draft's first i
        tokens). The cache then holds all k + 1 positions; speculate() or rewind() says which
        are kept. Graphed, each k is a CUDA graph of its own, captured at its first use.
        """
        self._need_prefill()
        rows = len(draft) + 1
        if not 1 < rows <= MAX_DRAFT + 1:
            raise EngineError(f'a verify step takes 1 to {MAX_DRAFT} drafted tokens, '
                              f'not {len(draft)}')
        check_room(self._position + rows - 1, self.info.max_context)
        if self._verify is None:
            vocab = self.weights.config.vocab_size
            self._verify = {
                'draft': torch.zeros(MAX_DRAFT, dtype=torch.long, device=self.device),
                'host': torch.zeros(MAX_DRAFT, dtype=torch.long,
                                    pin_memory=self.device.type == 'cuda'),
                'logits': torch.zeros(MAX_DRAFT + 1, vocab, dtype=torch.float32,
                                      device=self.device)}
        v = self._verify
        # The last verify's copy out of host is done: its logits were read on the host.
        v['host'][:rows - 1] = torch.tensor(list(draft), dtype=torch.long)
        v['draft'][:rows - 1].copy_(v['host'][:rows - 1], non_blocking=True)
        if self.graphed:
            self._captured(('verify', rows), lambda: self._verify_body(rows),
                           f'{rows - 1}-token verify step').replay()
        else:
            self._verify_body(rows)
        return v['logits'][:rows]

    def speculate(self, draft: Sequence[int]) -> List[int]:
        """
        Verify draft [k] (verify()) and keep what the model agrees with: 1 to k + 1 tokens.

        The kept tokens are the reply's next ones (speculative.accept_greedy or, sampling,
        accept_sampled); the cache keeps their positions and the next step feeds the last.
        """
        fed, start = self._feeds, self._position
        logits = self.verify(draft)
        if self._sampling.greedy:
            kept = accept_greedy(logits, draft)
        else:
            kept = accept_sampled(logits, draft, self._sampling, self._generator)
        accepted = len(kept) - 1
        self.logits.copy_(logits[accepted])
        if fed is not None and len(self._held) == start:
            self._held += [fed] + list(draft[:accepted])
        self._move_to(start + accepted + 1, kept[-1])
        return kept

    def rewind(self, length: int, token: int) -> None:
        """Keep the cache's first length positions; the next step feeds token at length."""
        self._need_prefill()
        if not 0 <= length <= self._position:
            raise EngineError(f'cannot rewind to position {length}: the cache holds '
                              f'{self._position}')
        self._move_to(length, token)

    def _move_to(self, length: int, token: int) -> None:
        # No step may be in flight: the callers (speculation) wait for each one.
        self._reply += 1   # a step launched before this is not of the sequence that follows
        self._forward_queued = False
        self._position = length
        self.pos.fill_(length)
        self.token.fill_(token)
        held = len(self._held) >= length
        self._held = self._held[:length] if held else []
        self._feeds = token if held else None

    def last_logits(self) -> torch.Tensor:
        if not self._started:
            raise EngineError('no logits yet: call prefill() first')
        return self.logits

    @torch.inference_mode()
    def prompt_logits(self, token_ids: Sequence[int]) -> torch.Tensor:
        """Teacher-forced float32 logits [n, vocab] of a token sequence; ends any reply."""
        if len(token_ids) > self.info.max_context:
            raise ContextFull(f'{len(token_ids)} tokens do not fit a context of '
                              f'{self.info.max_context}')
        self._started = False   # the cache now holds this sequence, not the reply
        self._forward_queued = False
        self._held, self._feeds, self._reply = [], None, self._reply + 1
        self._position = len(token_ids)
        ids = torch.tensor(list(token_ids), dtype=torch.long, device=self.device)
        logits = self.family.prompt_logits(self.weights, self.cache, ids, self.cos, self.sin,
                                           ops=self.ops.prompt)
        self._held = list(token_ids)
        return logits
