"""
Session 21: where the step's timing event goes, and what the protocol's step costs for each place.

The protocol times decoder.step() on the host: launch, then wait for the token. Session 20
(gap.py) found the step replayed without the timing event recorded ahead of it 0.045-0.124 ms
faster. Arms, each a synchronous step timed with time.perf_counter (as the protocol does), in
interleaved rounds from the same state (token, position) in one process:
  head       HEAD's launch(): a timing event, the graph, the token's copy, a timing event
  head, untimed wait
             the same, and an untimed event after the end event: the host waits for that one
  tree       the tree's decoder.launch().wait(), whatever it does
  end only   the graph, the copy, a timing event (no start event: no device time)
  untimed    the graph, the copy, an untimed event (session 20's `one graph`)
  start in   a graph per token slot whose first node records the slot's start event; the copy
             and the end event outside
  start in, untimed wait
             the same, and the host waits for an untimed event after the end event
  whole in   a graph per token slot holding the start event, the step, the copy and the end
             event: the launch is one replay
Each arm's greedy tokens are checked equal to head's from the same state, and the device times
of `start in` and `whole in` are checked with LAUNCHED_AHEAD steps in flight (positive, and
within a few percent of the launched-ahead interval), since two slots' events then overlap.
Usage: probe.py CTX ARCH...   (synthetic weights; medians over ROUNDS x STEPS steps)
"""
import statistics
import sys
import time

from physinf_ros.bench.protocol import GREEDY, prompt_ids
from physinf_ros.engine.base import LAUNCHED_AHEAD
from physinf_ros.engine.loading import load
import torch

ROUNDS = 5
STEPS = 60


def median_ms(values):
    return statistics.median(values) * 1000.0 if values else float('nan')


def capture(decoder, before=None, after=None):
    # One graph of the greedy step, with what `before` and `after` record around it.
    saved = decoder.token.clone(), decoder.pos.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=decoder._pool):
        if before:
            before()
        decoder._body(True)
        if after:
            after()
    decoder.token.copy_(saved[0])
    decoder.pos.copy_(saved[1])
    return graph


def arms_of(decoder):
    slots = torch.zeros(LAUNCHED_AHEAD, dtype=torch.long, pin_memory=True)
    starts = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(LAUNCHED_AHEAD)]
    ends = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(LAUNCHED_AHEAD)]
    plain = capture(decoder)
    started = [capture(decoder, before=starts[i].record) for i in range(LAUNCHED_AHEAD)]
    whole = []
    for i in range(LAUNCHED_AHEAD):
        def copy_and_end(i=i):
            slots[i:i + 1].copy_(decoder.token, non_blocking=True)
            ends[i].record()
        try:
            whole.append(capture(decoder, before=starts[i].record, after=copy_and_end))
        except Exception as exc:   # the copy to the host may not be capturable
            print(f'whole in: capture failed: {exc!r}', flush=True)
            whole = None
            break
    head_start = torch.cuda.Event(enable_timing=True)
    head_end = torch.cuda.Event(enable_timing=True)
    done = torch.cuda.Event()
    count = [0]

    def head():
        head_start.record()
        plain.replay()
        slots[0:1].copy_(decoder.token, non_blocking=True)
        head_end.record()
        return lambda: (head_end.synchronize(), head_start.elapsed_time(head_end))[1]

    def head_untimed_wait():
        head_start.record()
        plain.replay()
        slots[0:1].copy_(decoder.token, non_blocking=True)
        head_end.record()
        done.record()
        return lambda: (done.synchronize(), head_start.elapsed_time(head_end))[1]

    def tree():
        pending = decoder.launch()
        return lambda: pending.wait().step_ms

    def end_only():
        plain.replay()
        slots[0:1].copy_(decoder.token, non_blocking=True)
        head_end.record()
        return lambda: (head_end.synchronize(), None)[1]

    def untimed():
        plain.replay()
        slots[0:1].copy_(decoder.token, non_blocking=True)
        done.record()
        return lambda: (done.synchronize(), None)[1]

    def start_in():
        i = count[0] % LAUNCHED_AHEAD
        count[0] += 1
        started[i].replay()
        slots[i:i + 1].copy_(decoder.token, non_blocking=True)
        ends[i].record()
        return lambda: (ends[i].synchronize(), starts[i].elapsed_time(ends[i]))[1]

    def start_in_untimed_wait():
        i = count[0] % LAUNCHED_AHEAD
        count[0] += 1
        started[i].replay()
        slots[i:i + 1].copy_(decoder.token, non_blocking=True)
        ends[i].record()
        done.record()
        return lambda: (done.synchronize(), starts[i].elapsed_time(ends[i]))[1]

    def whole_in():
        i = count[0] % LAUNCHED_AHEAD
        count[0] += 1
        whole[i].replay()
        return lambda: (ends[i].synchronize(), starts[i].elapsed_time(ends[i]))[1]

    arms = {'head': head, 'head, untimed wait': head_untimed_wait, 'tree': tree,
            'end only': end_only, 'untimed': untimed, 'start in': start_in,
            'start in, untimed wait': start_in_untimed_wait}
    if whole:
        arms['whole in'] = whole_in
    return arms, slots


def measure(engine, arch: str, ctx: int) -> None:
    decoder = engine.decoder
    decoder.prefill(prompt_ids(engine.source.hf_config['vocab_size'], ctx, 0, 0), GREEDY)
    for _ in range(10):
        decoder.step()
    arms, slots = arms_of(decoder)
    state = decoder.token.clone(), decoder.pos.clone(), decoder._position

    def reset():
        decoder.token.copy_(state[0])
        decoder.pos.copy_(state[1])
        decoder._position = state[2]
        torch.cuda.synchronize()

    tokens = {}
    for name, arm in arms.items():   # the same 40 greedy steps from the same state
        reset()
        out = []
        for _ in range(40):
            arm()()
            out.append(int(decoder.token))
        tokens[name] = out
    host = {name: [] for name in arms}
    device = {name: [] for name in arms}
    for _ in range(ROUNDS):
        for name, arm in arms.items():
            reset()
            for step in range(STEPS + 5):
                begin = time.perf_counter()
                ms = arm()()
                seconds = time.perf_counter() - begin
                if step >= 5:
                    host[name].append(seconds)
                    if ms is not None:
                        device[name].append(ms / 1000.0)
    ahead = {}
    for name in ('tree', 'start in', 'whole in'):   # LAUNCHED_AHEAD in flight, as the loop runs
        if name not in arms:
            continue
        reset()
        queue = [arms[name]() for _ in range(LAUNCHED_AHEAD)]
        times, interval, last = [], [], time.perf_counter()
        for _ in range(200):
            times.append(queue.pop(0)() / 1000.0)
            now = time.perf_counter()
            interval.append(now - last)
            last = now
            queue.append(arms[name]())
        for wait in queue:
            wait()
        ahead[name] = (median_ms(times), min(times) * 1000.0, median_ms(interval))
    reset()
    for name in arms:
        same = 'tokens equal' if tokens[name] == tokens['head'] else 'TOKENS DIFFER'
        dev = f', device {median_ms(device[name]):.3f}' if device[name] else ''
        line = f'{arch} ctx {ctx} {name:22s}: host {median_ms(host[name]):.3f} ms{dev} ({same})'
        if name in ahead:
            med, low, gap = ahead[name]
            line += f'; ahead device {med:.3f} (min {low:.3f}), interval {gap:.3f}'
        print(line, flush=True)


if __name__ == '__main__':
    print(torch.cuda.get_device_name(), flush=True)
    contexts = [int(c) for c in sys.argv[1].split(',')]
    for arch in sys.argv[2:]:
        engine = load(f'synthetic:{arch}', 'graphed',
                      max_context=max(contexts) + 2 * ROUNDS * STEPS + 1024)
        for ctx in contexts:
            measure(engine, arch, ctx)
        engine.close()
        torch.cuda.empty_cache()
