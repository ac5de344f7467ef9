"""
Issue 14's per-kernel table: a row per profiled step, the time of each layer op alone.

Takes the profile stage's files (benchmarks/run_device.sh profile), named by their kernels file:
kernels_TAG.json (kernel_table.py: each kernel alone under Nsight Compute, placed by layer op) and,
beside it, profile_TAG.json (profile_step.py: the graphed step's wall time and launches). Each op
cell is us per step over all layers, with TB/s alone in brackets, as docs/PERF.md's per-kernel
tables have it since the first one (commit baaff1f, results/h200/profile_s6/). With --target, a
second table gives each op's time alone over its DRAM bytes at that datasheet bandwidth
(config/targets.yaml, the protocol's B_peak).

    python3 benchmarks/step_table.py results/h200/profile_s6/before_kernels_*.json --target h200
"""

import argparse
import json
from pathlib import Path

from kernel_table import ANCHORS, base_name, datasheet_gbs, floor_us

# The greedy step's six kernels a layer, in their order (llama.decode_layers: the norm and QKV
# GEMV, RoPE and attention's split and reduce, o_proj into the residual, the norm and gate/up
# with SiLU, down into the residual); the head is the op outside the layers that moves the most
# bytes, and the rest (embedding, argmax, the reply) is "other".
LAYER_OPS = ('QKV (+norm)', 'attn split', 'attn reduce', 'o_proj (+res.)',
             'gate/up (+norm, SiLU)', 'down (+res.)')
COLUMNS = LAYER_OPS + ('lm_head (+norm, argmax)', 'other')


def step_ops(ops):
    """Return {column: (us per step, bytes)} for kernel_table.py's rows of one step."""
    layer = {int(r['op'].split(':')[1]): r for r in ops if r['op'].startswith('layer:')}
    if sorted(layer) != list(range(len(LAYER_OPS))) or \
            base_name(layer[1]['kernel']) not in ANCHORS:
        raise ValueError(f'a layer of {len(layer)} kernels with '
                         f'{layer[1]["kernel"] if 1 in layer else "nothing"} second: this '
                         f'table knows the layer as {", ".join(LAYER_OPS)}')
    outside = [r for r in ops if not r['op'].startswith('layer:')]
    head = max(outside, key=lambda r: r['read'] + r['write'])
    rest = [r for r in outside if r is not head]
    cells = {name: (layer[i]['us_per_step'], layer[i]['read'] + layer[i]['write'])
             for i, name in enumerate(LAYER_OPS)}
    cells[COLUMNS[-2]] = (head['us_per_step'], head['read'] + head['write'])
    cells[COLUMNS[-1]] = (sum(r['us_per_step'] for r in rest),
                          sum(r['read'] + r['write'] for r in rest))
    return cells


def read_step(kernels_path):
    """Return one step's label, wall ms, launches, kernels-alone ms and op cells."""
    kernels_path = Path(kernels_path)
    prefix, _, tag = kernels_path.name.partition('kernels_')
    if not tag:
        raise ValueError(f'{kernels_path}: not a kernels_TAG.json of the profile stage')
    kernels = json.loads(kernels_path.read_text())
    profile = json.loads((kernels_path.parent / f'{prefix}profile_{tag}').read_text())
    label = f"{kernels['model'].replace('synthetic:', '')}, ctx {profile['ctx']}"
    return {'label': label + (f' ({prefix.rstrip("_")})' if prefix else ''),
            'wall_ms': profile['wall_ms_per_step'], 'launches': profile['kernels_per_step'],
            'alone_ms': kernels['kernel_us'] / 1000, 'cells': step_ops(kernels['ops'])}


def time_row(step):
    """Return the time row: wall, alone, launches, then each op's us (TB/s alone)."""
    cells = [f'{us:.0f} ({nbytes / us / 1e6:.2f})' if name != 'other' else f'{us:.0f}'
             for name, (us, nbytes) in step['cells'].items()]
    return (f"| {step['label']} | {step['wall_ms']:.3f} | {step['alone_ms']:.3f} | "
            f"{step['launches']:.0f} | " + ' | '.join(cells) + ' |')


def floor_row(step, peak_gbs):
    """Return each op's us alone over its bytes at peak_gbs, after alone, floor and over."""
    over = {name: us - floor_us(nbytes, peak_gbs)
            for name, (us, nbytes) in step['cells'].items()}
    floor_ms = floor_us(sum(nbytes for _, nbytes in step['cells'].values()), peak_gbs) / 1e3
    return (f"| {step['label']} | {step['alone_ms']:.3f} | {floor_ms:.3f} | "
            f"{step['alone_ms'] - floor_ms:.3f} | "
            + ' | '.join(f'{us:.0f}' for us in over.values()) + ' |')


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('kernels', nargs='+', help="the profile stage's kernels_TAG.json files")
    parser.add_argument('--target', help='a key of config/targets.yaml: also each op over its '
                        'bytes at that datasheet bandwidth')
    args = parser.parse_args(argv)
    try:
        steps = [read_step(path) for path in args.kernels]
    except (OSError, ValueError) as error:
        parser.error(str(error))
    peak_gbs = datasheet_gbs(parser, args.target) if args.target else None
    print('| step | wall ms | kernels alone, ms | launches | ' + ' | '.join(COLUMNS) + ' |')
    print('|---' * (4 + len(COLUMNS)) + '|')
    for step in steps:
        print(time_row(step))
    if peak_gbs:
        print(f'\nus a step each op takes alone over its bytes at {peak_gbs:g} GB/s '
              f'({args.target}):\n')
        print('| step | alone ms | floor ms | over ms | ' + ' | '.join(COLUMNS) + ' |')
        print('|---' * (4 + len(COLUMNS)) + '|')
        for step in steps:
            print(floor_row(step, peak_gbs))


if __name__ == '__main__':
    main()
