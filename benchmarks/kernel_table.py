"""
Turn Nsight Compute's raw CSV of one graphed step into a table per layer op.

Each kernel ran alone under ncu, so its time is its own (no overlap with its neighbours, no
launch gap). Kernels are placed by their order in the step: the attention split kernel (Triton's
or attention_split.cu's), once per layer, marks the layers; the kernels that repeat with it are
the layer's ops (by position), the rest come before or after the layers. Per op: time summed
over layers, DRAM bytes read and written, achieved bandwidth, grid size and registers; with
--target, also the op's bytes at that target's datasheet bandwidth (config/targets.yaml, the
protocol's B_peak), its floor, and the time it takes over that floor: where a step's distance
from t_floor sits.

    python3 benchmarks/kernel_table.py step.csv[.gz] --model synthetic:llama-3.1-8b \
        --target h200 --out t.json
"""

import argparse
import csv
import gzip
import json
import statistics

from physinf_ros.engine.model.config import ModelConfig
from physinf_ros.engine.weights.resolve import resolve
from physinf_ros.measurement.targets import detect
import torch

# One per layer in every graphed step: the Triton split kernel, or attention_split.cu's where the
# GPU's kernels.yaml entry asks for it (ncu names that one `void split_kernel<128, ...>`).
ANCHORS = ('_attn_split_kernel', 'split_kernel')


def read_kernels(path):
    """Rows of ncu's raw page (base units): name, ns, bytes read and written, grid, registers."""
    opener = gzip.open if str(path).endswith('.gz') else open   # stored files are gzipped
    with opener(path, 'rt') as f:
        lines = [line for line in f if line.startswith('"')]
    rows = list(csv.DictReader(lines))[1:]   # the first row under the header holds units
    return [{'name': row['Kernel Name'].split('(')[0].strip(),
             'ns': _number(row, 'gpu__time_duration.sum'),
             'read': _number(row, 'dram__bytes_read.sum'),
             'write': _number(row, 'dram__bytes_write.sum'),
             'grid': row.get('launch__grid_size', ''),
             'registers': row.get('launch__registers_per_thread', '')} for row in rows]


def _number(row, metric):
    return float(row[metric].replace(',', ''))   # ncu writes thousands with commas: "3,968"


def base_name(name):
    """Return a kernel's name without return type, namespace and template arguments."""
    return name.replace('<unnamed>::', '').split('<')[0].split()[-1].split('::')[-1]


def roles(names, layers):
    """Label each kernel 'pre:i', 'layer:j' (its place in the layer) or 'post:i'."""
    anchors = [i for i, name in enumerate(names) if base_name(name) in ANCHORS]
    if len(anchors) != layers:
        raise ValueError(f'{len(anchors)} attention split launches ({" or ".join(ANCHORS)}) '
                         f'for {layers} layers')
    period = anchors[1] - anchors[0] if layers > 1 else len(names)
    before = 0   # how many of a layer's kernels come before its attention
    while before < period and anchors[0] - before - 1 >= 0 and layers > 1 and \
            names[anchors[0] - before - 1] == names[anchors[1] - before - 1]:
        before += 1
    first, end = anchors[0] - before, anchors[-1] - before + period
    labels = []
    for i in range(len(names)):
        if i < first:
            labels.append(f'pre:{i}')
        elif i >= end:
            labels.append(f'post:{i - end}')
        else:
            labels.append(f'layer:{(i - first) % period}')
    return labels


def floor_us(nbytes, peak_gbs):
    """Return the us that nbytes of DRAM traffic take at peak_gbs (GB/s)."""
    return nbytes / peak_gbs / 1e3


def datasheet_gbs(parser, key):
    """Return the bandwidth of config/targets.yaml's key, or stop with the parser's error."""
    try:
        return detect(torch.device('cpu'), key).bandwidth_gbs
    except ValueError as error:
        parser.error(f'--target: {error}')


def table(kernels, layers, peak_gbs=None):
    """Rows per op; with peak_gbs (GB/s), each op's floor_us and over_floor_us too."""
    labels = roles([k['name'] for k in kernels], layers)
    ops = {}
    for label, kernel in zip(labels, kernels):
        op = ops.setdefault(label, {'op': label, 'kernel': kernel['name'], 'grid':
                                    kernel['grid'], 'registers': kernel['registers'],
                                    'ns': [], 'read': 0.0, 'write': 0.0})
        op['ns'].append(kernel['ns'])
        op['read'] += kernel['read']
        op['write'] += kernel['write']
    rows = []
    for op in ops.values():
        total_ns = sum(op['ns'])
        rows.append({**{k: v for k, v in op.items() if k != 'ns'}, 'calls': len(op['ns']),
                     'us_per_call': statistics.median(op['ns']) / 1000,
                     'us_per_step': total_ns / 1000,
                     'gbps': (op['read'] + op['write']) / total_ns})
        if peak_gbs:
            rows[-1]['floor_us'] = floor_us(op['read'] + op['write'], peak_gbs)
            rows[-1]['over_floor_us'] = rows[-1]['us_per_step'] - rows[-1]['floor_us']
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('csv')
    parser.add_argument('--model', required=True)
    parser.add_argument('--target', help='a key of config/targets.yaml: each op against its '
                        'bytes at that datasheet bandwidth')
    parser.add_argument('--out')
    args = parser.parse_args(argv)
    layers = ModelConfig.from_hf(resolve(args.model).hf_config).num_layers
    peak_gbs = datasheet_gbs(parser, args.target) if args.target else None
    kernels = read_kernels(args.csv)
    rows = table(kernels, layers, peak_gbs)
    total_us = sum(r['us_per_step'] for r in rows)
    total_bytes = sum(r['read'] + r['write'] for r in rows)
    print(f'{args.model}: {len(kernels)} kernels, {total_us:.1f} us of kernel time alone, '
          f'{total_bytes / 1e9:.3f} GB moved ({total_bytes / total_us / 1e3:.0f} GB/s)'
          + (f'; at {peak_gbs:g} GB/s ({args.target}) '
             f'{floor_us(total_bytes, peak_gbs):.1f} us'
             if peak_gbs else ''))
    floor = ' floor us | over |' if peak_gbs else ''
    print(f'| op | kernel | calls | us/call | us/step | GB/s | grid | regs |{floor}')
    print('|---|---|---|---|---|---|---|---|' + '---|---|' * bool(peak_gbs))
    for r in rows:
        cells = (f" {r['floor_us']:.1f} | {r['over_floor_us']:.1f} |" if peak_gbs else '')
        print(f"| {r['op']} | {r['kernel']} | {r['calls']} | {r['us_per_call']:.2f} | "
              f"{r['us_per_step']:.1f} | {r['gbps']:.0f} | {r['grid']} | {r['registers']} |"
              + cells)
    if args.out:
        with open(args.out, 'w') as f:
            json.dump({'model': args.model, 'kernels': len(kernels), 'kernel_us': total_us,
                       'bytes': total_bytes, 'target': args.target, 'peak_gbs': peak_gbs,
                       'ops': rows}, f, indent=1)


if __name__ == '__main__':
    main()
