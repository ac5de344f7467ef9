"""
Backends `eager` and `graphed`: our own forward (llama.py) with a static KV cache.

`eager` launches the decode step op by op. `graphed` captures the whole step (every layer, the
final norm, the lm_head and the next-token choice) once into a CUDA graph and replays it: the
token and position live in device tensors that the graph itself advances, so a step costs one
replay and one 8-byte copy of the chosen token back to the host.

On CUDA (graphed or eager) a step is launched without waiting for it: its token is copied into
a pinned host buffer behind the step and an event marks when it is there, so the generation
loop can queue step n+1 before it hands token n to its caller and the device never waits for
the host's publishing. Steps are timed by CUDA events around them (device time of the step);
a graphed step's start event is the first node of its graph, one graph per token in flight, so
nothing of the step is queued ahead of its replay (0.006 ms a step faster on the smallest shapes;
docs/PERF.md, session 21).

Context policy: graphs per sampling mode (greedy, sampled), captured for max_context. The
attention kernel reads the filled length from the device position, so the graph reads only
the filled part of the cache at every length: no buckets, no padding to the maximum.
"""

from dataclasses import replace
from typing import Callable, Dict, List, Optional, Sequence, TYPE_CHECKING

import torch

from . import ops_torch
from .base import (check_prompt, check_room, ContextFull, DecoderInfo, DeferredStep,
                   EngineError, LAUNCHED_AHEAD, PendingStep, Sampling, StepResult)
from .llama import decode_layers, KVCache, prefill, prompt_logits, rope_tables, Weights
from .sampling import choose, make_generator, sample

if TYPE_CHECKING:   # kernels imports triton, which only CUDA runs need
    from .kernels import KernelConfig


class _DeviceStep:
    """A step queued on the device: its token lands in a pinned slot, then its end event."""

    def __init__(self, slot: torch.Tensor, start: torch.cuda.Event, end: torch.cuda.Event):
        self._slot, self._start, self._end = slot, start, end

    def wait(self) -> StepResult:
        self._end.synchronize()
        return StepResult(int(self._slot), self._start.elapsed_time(self._end))


class NativeDecoder:
    """The Decoder protocol on our forward; graphed=True replays a captured step."""

    def __init__(self, weights: Weights, info: DecoderInfo, device: torch.device,
                 graphed: bool, log: Callable[[str], None] = lambda _: None,
                 kernel_config: Optional['KernelConfig'] = None):
        config = weights.config
        self.info = info
        self.device = device
        self.weights = weights
        self.step_facts = weights.step_facts   # what a step reads is what the weights hold
        self.log = log
        self.cache = KVCache.allocate(config, info.max_context, device, weights.dtype)
        self.cos, self.sin = rope_tables(config, info.max_context, device)
        if device.type == 'cuda':
            # The kernels run as configured (kernels.yaml's entry for this GPU unless given).
            from .kernels import KernelConfig, KernelOps
            self.ops = KernelOps(kernel_config or KernelConfig.for_device(device, log))
            if weights.step_facts().group_size:   # a 4-bit model: say which kernel streams it
                log(self.ops.config.q4_kernel_note(device))
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
        self._position = 0
        self._started = False
        self._sampling = Sampling()
        self._generator: Optional[torch.Generator] = None
        self._graphs: Dict[bool, List[torch.cuda.CUDAGraph]] = {}
        self._pool = None
        if device.type == 'cuda':
            # One of each per unread step: a launched step's token and events stay intact until
            # LAUNCHED_AHEAD more are launched, by which time the loop has read them.
            self._token_slots = torch.zeros(LAUNCHED_AHEAD, dtype=torch.long, pin_memory=True)
            # external: a start event recorded inside a graph's capture becomes its node.
            self._events = [(torch.cuda.Event(enable_timing=True, external=True),
                             torch.cuda.Event(enable_timing=True))
                            for _ in range(LAUNCHED_AHEAD)]
            self._launches = 0
            self._warm_up()

    @property
    def position(self) -> int:
        return self._position

    @torch.inference_mode()
    def _body(self, greedy: bool) -> None:
        # The step as captured: everything on the device, nothing read back.
        w = self.weights
        x = decode_layers(w, self.cache, self.token, self.pos, self.cos, self.sin, self.ops)
        eps = w.config.rms_norm_eps
        if greedy:
            self.ops.greedy_head(x, w.norm, w.lm_head, eps, self.logits, self.token, self.pos)
            return
        self.ops.rms_matvec(x, w.norm, w.lm_head, None, eps, out=self.logits)
        self.token.copy_(sample(self.logits, self.temperature, self.top_p, race=self.race))
        self.pos.add_(1)

    def _warm_up(self) -> None:
        # Compile the kernels (and capture the greedy graph) now rather than in the first reply.
        if not self.graphed:
            self._body(greedy=True)
            return
        try:
            self._graph(greedy=True)
        except torch.cuda.OutOfMemoryError as exc:
            self._graphs.clear()
            self._pool = None
            torch.cuda.empty_cache()
            self.graphed = False
            note = f'CUDA graph capture ran out of memory ({exc}); decoding eager instead'
            self.log('warning: ' + note)
            self.info = replace(self.info, backend='eager', note=note)
            self._body(greedy=True)

    def _graph(self, greedy: bool) -> List[torch.cuda.CUDAGraph]:
        # One graph per token slot, each starting with its slot's start event.
        graphs = self._graphs.get(greedy)
        if graphs is not None:
            return graphs
        saved = self.token.clone(), self.pos.clone()
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(2):  # compile kernels and settle the allocator outside the capture
                self._body(greedy)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        graphs = []
        for start, _ in self._events:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool):
                start.record()
                self._body(greedy)
            self._pool = graph.pool()
            graphs.append(graph)
        self.token.copy_(saved[0])
        self.pos.copy_(saved[1])
        self._graphs[greedy] = graphs
        self.log(f'captured the {"greedy" if greedy else "sampling"} decode step in CUDA graphs, '
                 f'one per token in flight ({len(graphs)})')
        return graphs

    @torch.inference_mode()
    def prefill(self, token_ids: Sequence[int], sampling: Sampling) -> int:
        check_prompt(token_ids, self.info.max_context)
        self._sampling = sampling
        self._generator = make_generator(sampling, self.device)
        if not sampling.greedy:
            self.temperature.fill_(sampling.temperature)
            self.top_p.fill_(sampling.top_p)
            if self.graphed:
                self._graph(greedy=False)
        ids = torch.tensor(list(token_ids), dtype=torch.long, device=self.device)
        logits = prefill(self.weights, self.cache, ids, self.cos, self.sin)
        self.logits.copy_(logits)
        first = choose(logits, sampling, self._generator)
        self.token.copy_(first.view(1))
        self.pos.fill_(len(token_ids))
        self._position = len(token_ids)
        self._started = True
        return int(first)

    def step(self, token: Optional[int] = None) -> int:
        self._need_prefill()
        if token is not None:
            self.token.fill_(token)   # teacher forcing: one small copy before the step
        return self.launch().wait().token

    def launch(self) -> PendingStep:
        self._need_prefill()
        if self.device.type != 'cuda':
            return DeferredStep(self._run_step)   # a CPU computes as it launches
        check_room(self._position, self.info.max_context)
        index = self._launches % LAUNCHED_AHEAD
        self._launches += 1
        start, end = self._events[index]
        slot = self._token_slots[index:index + 1]
        if not self.graphed:
            start.record()   # a graph records its own
        self._enqueue_step(index)
        slot.copy_(self.token, non_blocking=True)
        end.record()
        return _DeviceStep(slot, start, end)

    def _need_prefill(self) -> None:
        if not self._started:
            raise EngineError('step() before prefill()')

    def _run_step(self) -> int:
        check_room(self._position, self.info.max_context)
        self._enqueue_step(0)
        return int(self.token)

    def _enqueue_step(self, index: int) -> None:
        greedy = self._sampling.greedy
        if not greedy:
            # The request's noise, drawn outside the graph so its seed holds (one launch).
            self.race.exponential_(generator=self._generator)
        if self.graphed:
            self._graph(greedy)[index].replay()
        else:
            self._body(greedy)
        self._position += 1

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
        self._position = len(token_ids)
        ids = torch.tensor(list(token_ids), dtype=torch.long, device=self.device)
        return prompt_logits(self.weights, self.cache, ids, self.cos, self.sin)
