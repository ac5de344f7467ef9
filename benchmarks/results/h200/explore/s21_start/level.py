"""
Session 21: what in a fresh decoder sets its level, the 8B's step spread of 4.05-4.15 ms.

Run 5 found sessions of one process, on one copy of the weights, jumping between levels from
one fresh decoder to the next. Three arms in turn, SESSIONS each, all with the same prompt:
  same     the same decoder, its cache and graphs kept: a prefill again, then the session
  graphs   the same decoder and cache, its graphs captured anew (new graph pool) first
  fresh    a new decoder (new cache and graphs), as the protocol's sessions start
Each session as the protocol's: the prefill, 5 warm-up steps, 30 measured decoder.step().
If `same` spreads as `fresh` does, placement is not what sets the level.
With `vary`, session i's prompt is the protocol's of slot i (run 7), else slot 0's for all.
Usage: level.py CTX ARCH [vary]
"""
import gc
import statistics
import sys

from physinf_ros.bench.protocol import Plan, prompt_ids, timed_session
from physinf_ros.engine.loading import load
import torch

SESSIONS = 10


def main(ctx: int, arch: str, vary: bool) -> None:
    print(torch.cuda.get_device_name(), flush=True)
    plan = Plan()
    engine = load(f'synthetic:{arch}', 'graphed', max_context=plan.max_context(ctx))
    vocab = engine.source.hf_config['vocab_size']
    levels = {'same': [], 'graphs': [], 'fresh': []}
    for session in range(SESSIONS):
        ids = prompt_ids(vocab, ctx, plan.seed, session if vary else 0)
        for arm in levels:
            if arm == 'graphs':
                engine.decoder._graphs.clear()
                engine.decoder._pool = None
                gc.collect()
                engine.decoder._graph(True)
            elif arm == 'fresh':
                engine.renew('graphed', max_context=plan.max_context(ctx))
            levels[arm].append(statistics.median(timed_session(engine.decoder, ids, plan)[1]))
    for arm, values in levels.items():
        print(f'{arch} ctx {ctx} {arm:6s}: ' + ' '.join(f'{v:.3f}' for v in values)
              + f' (spread {max(values) - min(values):.3f} ms)', flush=True)


if __name__ == '__main__':
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3:] == ['vary'])
