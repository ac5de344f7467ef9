"""
Session 30: how the host learns that a synchronous step's token is there.

The decoder's step (the protocol's) replays the graph, records an event after it and waits in
`Event.synchronize()`, then reads the pinned row the step's last kernel wrote. The row is in
host memory, written over PCIe by that kernel before it ends: the host can see the token before
the kernel's end, the event's completion and the wake-up from the wait. Arms, interleaved in
rounds from the same decoder (one process per shape), ROUNDS x STEPS synchronous steps timed on
the host with time.perf_counter:
  step   decoder.launch().wait(): the replay, the event, Event.synchronize(), the row read
  query  the same, waiting by spinning on Event.query()
  poll   the row's time cleared before the replay, then read until the step's kernel has
         written it (the event is still recorded, not waited for); its token checked against
         the row once the event has completed
  poll numpy  the same through a numpy view of the row (a read costs no tensor op: run 9)
and the device's own time (step_ms, the kernels' stamps) of the `step` arm.
Usage: wait_probe.py CTX ARCH...
"""
import gc
import statistics
import sys
import time

from physinf_ros.bench.protocol import Plan, prompt_ids
from physinf_ros.engine.base import Sampling
from physinf_ros.engine.loading import load
import torch

ROUNDS, STEPS = 5, 60
NUMPY = True   # run 8 checked the tensor poll's rows (False), run 9 the numpy poll's


def main(ctx: int, archs) -> None:
    print(torch.cuda.get_device_name(), flush=True)
    plan = Plan()
    for arch in archs:
        engine = load(f'synthetic:{arch}', 'graphed', max_context=plan.max_context(ctx) + 4000)
        decoder = engine.decoder
        decoder.prefill(prompt_ids(engine.source.hf_config['vocab_size'], ctx, plan.seed, 0),
                        Sampling())
        graph = decoder._graph(True)
        times = {'step': [], 'query': [], 'poll': [], 'poll numpy': [], 'step_ms': []}
        tokens = {'step': [], 'poll': []}

        def step():
            result = decoder.launch().wait()
            times['step_ms'].append(result.step_ms)
            tokens['step'].append(result.token)

        def query():
            index = decoder.position % len(decoder._done)
            graph.replay()
            decoder._position += 1
            done = decoder._done[index]
            done.record()
            while not done.query():
                pass
            return decoder._host_out[index].tolist()

        def poll():
            index = decoder.position % len(decoder._done)
            row = decoder._host_out[index]
            row[1] = 0
            graph.replay()
            decoder._position += 1
            decoder._done[index].record()
            while row[1].item() == 0:
                pass
            tokens['poll'].append(int(row[0]))

        views = [row.numpy() for row in decoder._host_out]   # the pinned rows, no tensor ops

        def poll_numpy():
            index = decoder.position % len(decoder._done)
            row = views[index]
            row[1] = 0
            graph.replay()
            decoder._position += 1
            decoder._done[index].record()
            while row[1] == 0:
                pass
            tokens['poll'].append(int(row[0]))

        arms = {'step': step, 'query': query, 'poll': poll, 'poll numpy': poll_numpy}
        for _ in range(10):
            step()
        # Is the polled row whole? Its token read at the poll against the same row once the
        # event has completed, over 200 steps.
        stale = 0
        for _ in range(200):
            index = decoder.position % len(decoder._done)
            (poll_numpy if NUMPY else poll)()
            decoder._done[index].synchronize()
            stale += tokens['poll'][-1] != int(decoder._host_out[index][0])
        tokens['poll'].clear()
        times['step_ms'].clear()
        torch.cuda.synchronize()
        gc.disable()
        for _ in range(ROUNDS):
            for name, arm in arms.items():
                for _ in range(STEPS):
                    start = time.perf_counter()
                    arm()
                    times[name].append((time.perf_counter() - start) * 1000.0)
                torch.cuda.synchronize()
        gc.enable()
        cells = [f'{name} {statistics.median(v):.4f}' for name, v in times.items()]
        # The tokens differ from step to step (each step feeds the next); both arms must give
        # real tokens of the vocabulary, and poll's must not be stale rows (all equal).
        vocab = engine.source.hf_config['vocab_size']
        sane = all(0 <= t < vocab for t in tokens['poll']) and len(set(tokens['poll'])) > 1
        print(f'{arch} ctx {ctx}: ' + ', '.join(cells) + f' ms; poll tokens sane {sane}, '
              f'stale at the poll {stale} of 200', flush=True)
        engine.close()


if __name__ == '__main__':
    main(int(sys.argv[1]), sys.argv[2:])
