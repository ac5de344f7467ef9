"""
Session 33: the committed protocol steps as a fixed cost per kernel plus a share of the floor.

Each graphed bf16 cell of the committed protocol files is fitted, by least squares, as

    step_ms_p50 - t_floor_ms = per_kernel_us * kernels + stream_share * t_floor_ms

where kernels is the greedy step's launches: six a layer (QKV, the attention split and its
reduce, o_proj, gate/up, down: llama.decode_layers) and three more (the embedding, the head and
its greedy finish: kernels.greedy_head). per_kernel_us is what each launch costs beyond its bytes
(boundary, ramp, tail); stream_share is how far below B_peak the kernels stream. Then, for each
of issue 14's robot goals, what the fit says it needs: the per-kernel cost at today's stream
share, or the kernel count at today's per-kernel cost. No GPU: it reads the committed files.

    PYTHONPATH=. python3 benchmarks/results/h200/explore/s33_keys/step_model.py
"""
import os

import numpy as np
from physinf_ros.bench import results
from physinf_ros.engine.llama import ModelConfig
from physinf_ros.engine.models import resolve

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..')
FILES = ('robots_llama-3.2-1b.json', 'robots_qwen2.5-1.5b.json', 'robots_llama-3.2-3b.json',
         'graphed_llama-3.1-8b.json')
GOALS_MS = {'synthetic:llama-3.2-1b': 0.68, 'synthetic:qwen2.5-1.5b': 0.94,   # issue 14
            'synthetic:llama-3.2-3b': 1.85}


def kernels_per_step(model):
    """Return the launches of one greedy graphed step: six a layer, embedding, head, finish."""
    return 6 * ModelConfig.from_hf(resolve(model).hf_config).num_layers + 3


def cells():
    for name in FILES:
        for cell in results.read(os.path.join(RESULTS, name))['cells']:
            if cell['mode'] == 'graphed':
                yield name, cell


def main():
    rows = [(name, c['model'], c['ctx'], kernels_per_step(c['model']), c['t_floor_ms'],
             c['step_ms_p50']) for name, c in cells()]
    a = np.array([[k, floor] for _, _, _, k, floor, _ in rows])
    over = np.array([step - floor for *_, floor, step in rows])
    (per_kernel_ms, share), *_ = np.linalg.lstsq(a, over, rcond=None)
    print(f'fit over {len(rows)} cells: {per_kernel_ms * 1e3:.2f} us a kernel + '
          f'{share:.3f} x t_floor')
    print('| file | model | ctx | kernels | t_floor ms | step ms | over floor us | fit us |')
    print('|---|---|---|---|---|---|---|---|')
    for (name, model, ctx, k, floor, step), fitted in zip(rows, a @ (per_kernel_ms, share)):
        print(f'| {name} | {model} | {ctx} | {k} | {floor:.3f} | {step:.3f} | '
              f'{(step - floor) * 1e3:.0f} | {fitted * 1e3:.0f} |')
    print("| model | goal ms | per kernel, at the fit's stream share | kernels, at the fit's "
          'per-kernel cost |')
    print('|---|---|---|---|')
    for name, model, ctx, k, floor, step in rows:
        if model in GOALS_MS:
            room = GOALS_MS[model] - floor * (1 + share)
            print(f'| {model} | {GOALS_MS[model]} | {room / k * 1e3:.2f} us (now fitted '
                  f'{per_kernel_ms * 1e3:.2f}) | {room / per_kernel_ms:.0f} (now {k}) |')


if __name__ == '__main__':
    main()
