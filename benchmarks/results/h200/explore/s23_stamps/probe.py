"""
Session 23: what a synchronous graphed step still spends outside the device's own time.

Arms, interleaved in rounds from the same decoder (one process per shape), each ROUNDS x STEPS
synchronous steps timed on the host with time.perf_counter:
  step      decoder.step(): the replay, the token's copy (16 bytes) into a pinned slot, an
            untimed event, its wait, the slot read (the protocol's step)
  no copy   the replay and the event, waited for: the copy left out (the token not read)
  two ahead the decoder's own launch() with a step always in flight (as the generation loop):
            the interval between tokens
and the device's own time of the `step` arm (step_ms, the kernels' stamps).
Usage: probe.py CTX ARCH...
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


def main(ctx: int, archs) -> None:
    print(torch.cuda.get_device_name(), flush=True)
    plan = Plan()
    for arch in archs:
        engine = load(f'synthetic:{arch}', 'graphed', max_context=plan.max_context(ctx) + 4000)
        decoder = engine.decoder
        decoder.prefill(prompt_ids(engine.source.hf_config['vocab_size'], ctx, plan.seed, 0),
                        Sampling())
        graph, done = decoder._graph(True), decoder._done[0]
        times = {'step': [], 'no copy': [], 'two ahead': [], 'step_ms': []}

        def step():
            result = decoder.launch().wait()
            times['step_ms'].append(result.step_ms)

        def no_copy():
            graph.replay()
            decoder._position += 1
            done.record()
            done.synchronize()

        arms = {'step': step, 'no copy': no_copy}
        for _ in range(10):
            step()
        times['step_ms'].clear()
        gc.disable()
        for _ in range(ROUNDS):
            for name, arm in arms.items():
                for _ in range(STEPS):
                    start = time.perf_counter()
                    arm()
                    times[name].append((time.perf_counter() - start) * 1000.0)
            queue = [decoder.launch()]
            start = time.perf_counter()
            for _ in range(STEPS):
                queue.append(decoder.launch())
                queue.pop(0).wait()
            times['two ahead'].append((time.perf_counter() - start) * 1000.0 / STEPS)
            queue.pop(0).wait()
        gc.enable()
        cells = [f'{name} {statistics.median(v):.4f}' for name, v in times.items()]
        print(f'{arch} ctx {ctx}: ' + ', '.join(cells) + ' ms', flush=True)
        engine.close()


if __name__ == '__main__':
    main(int(sys.argv[1]), sys.argv[2:])
