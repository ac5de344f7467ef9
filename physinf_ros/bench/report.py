"""
physinf-report: results files from one or many targets -> report.md and PNG plots.

Plots: R_floor by context per target; ms per step per target at one context (the ladder, with
t_floor marked); A/B speedup with its 95% CI; cost per million tokens (targets with a price).
Given stack-matrix files (modes with a stack, physinf-attention files), it adds the paper's two
software-stack tables with the paper's figures beside ours (matrix.py) and a plot by stack.
"""

import argparse
from collections import defaultdict
import json
from pathlib import Path
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from . import matrix, results, ttft

PLOTS = {
    'r_floor': 'r_floor_by_context.png',
    'ladder': 'ms_per_step_ladder.png',
    'speedup': 'eager_vs_graphed.png',
    'cost': 'cost_per_mtok.png',
}
MISSING = {
    'r_floor': 'no cell has a roofline (the model is outside the modelled Llama family)',
    'ladder': 'no cells',
    'speedup': 'no A/B comparison (a single mode was measured)',
    'cost': 'no target has an hourly price (targets.yaml, --price-per-hour or price_per_hour)',
}
REFERENCE_CTX = 2048   # the ladder and cost plots compare targets at this context when measured


def _labels(docs: Sequence[dict]) -> List[str]:
    # One label per file: the target's name, flagged when its bandwidth was measured, and
    # numbered when several files come from the same target.
    base = [d['target']['name'] + (' (B measured)' if d['target']['measured'] else '')
            for d in docs]
    return [label if base.count(label) == 1 else f'{label} #{base[:i + 1].count(label)}'
            for i, label in enumerate(base)]


def rows(docs: Sequence[dict]) -> List[dict]:
    """Return every cell of every document, with its file's target label."""
    return [dict(cell, label=label, file_index=i)
            for i, (doc, label) in enumerate(zip(docs, _labels(docs))) for cell in doc['cells']]


def reference_ctx(cells: Sequence[dict]) -> Optional[int]:
    """Return REFERENCE_CTX when it was measured, else the smallest context measured."""
    contexts = {c['ctx'] for c in cells}
    if not contexts:
        return None
    return REFERENCE_CTX if REFERENCE_CTX in contexts else min(contexts)


def _by_model(cells: Sequence[dict]) -> Dict[str, List[dict]]:
    models = defaultdict(list)
    for cell in cells:
        models[cell['model']].append(cell)
    return dict(models)


def _series(cells: Sequence[dict], value: str) -> Dict[Tuple[str, str], List[dict]]:
    lines = defaultdict(list)
    for cell in sorted(cells, key=lambda c: c['ctx']):
        if cell.get(value) is not None:
            lines[cell['label'], cell['mode']].append(cell)
    return dict(lines)


def _figure(models: int, title: str):
    import matplotlib
    matplotlib.use('Agg')   # files only: no display on a robot or a CI machine
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(models, 1, figsize=(11, 4.2 * models), squeeze=False)
    fig.suptitle(title)
    return plt, fig, [row[0] for row in axes]


def _context_axis(ax, cells: Sequence[dict]) -> None:
    ax.set_xscale('log', base=2)
    contexts = sorted({c['ctx'] for c in cells})
    ax.set_xticks(contexts)
    ax.set_xticklabels([str(ctx) for ctx in contexts])
    ax.minorticks_off()
    ax.set_xlabel('context (tokens)')


def _side_legend(ax) -> None:
    ax.legend(fontsize='small', loc='center left', bbox_to_anchor=(1.01, 0.5))


def _style(cells: Sequence[dict]):
    # One colour per target, one line style per mode, so a target's modes read as a pair.
    labels = list(dict.fromkeys(c['label'] for c in cells))
    modes = list(dict.fromkeys(c['mode'] for c in cells))
    dashes = ['-', '--', ':', '-.']
    return lambda label, mode: {'color': f'C{labels.index(label) % 10}',
                                'linestyle': dashes[modes.index(mode) % len(dashes)]}


def _save(plt, fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_r_floor(cells: Sequence[dict], path: Path) -> Optional[Path]:
    """Draw R_floor against context, one line per target and mode, a panel per model."""
    models = {m: c for m, c in _by_model(cells).items() if _series(c, 'R_floor')}
    if not models:
        return None
    plt, fig, axes = _figure(len(models), 'R_floor = t_floor / t_step by context')
    for ax, (model, model_cells) in zip(axes, models.items()):
        style = _style(model_cells)
        for (label, mode), line in _series(model_cells, 'R_floor').items():
            ax.plot([c['ctx'] for c in line], [c['R_floor'] for c in line], marker='o',
                    label=f'{label}, {mode}', **style(label, mode))
        _context_axis(ax, model_cells)
        ax.set_ylabel('R_floor')
        ax.set_ylim(bottom=0)
        ax.set_title(model)
        _side_legend(ax)
        ax.grid(alpha=0.3)
    return _save(plt, fig, path)


def _bars(ax, groups: List[str], modes: List[str], value, names: List[str]) -> None:
    # Grouped bars: one group per target, one bar per mode; value(group, mode) -> number|None.
    width = 0.8 / max(len(modes), 1)
    for j, mode in enumerate(modes):
        xs, ys = [], []
        for i, group in enumerate(groups):
            y = value(group, mode)
            if y is not None:
                xs.append(i + (j - (len(modes) - 1) / 2) * width)
                ys.append(y)
        ax.bar(xs, ys, width, label=mode)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(names, fontsize='small')


def _at_ctx(cells: Sequence[dict], ctx: int) -> Dict[Tuple[str, str], dict]:
    return {(c['label'], c['mode']): c for c in cells if c['ctx'] == ctx}


def _ladder_order(cells: Sequence[dict]) -> Tuple[List[str], List[str]]:
    # Slowest memory first: the ladder climbs in B_peak. Returns labels and tick names.
    peaks = {c['label']: c['B_peak_gbs'] for c in cells}
    labels = sorted(peaks, key=peaks.get)
    return labels, [f'{label}\n{peaks[label]:g} GB/s' for label in labels]


def plot_ladder(cells: Sequence[dict], path: Path) -> Optional[Path]:
    """Draw ms per step by target at the reference context, with each target's t_floor."""
    ctx = reference_ctx(cells)
    if ctx is None:
        return None
    models = _by_model(cells)
    plt, fig, axes = _figure(len(models), f'ms per decode step at context {ctx} '
                                          '(black ticks: t_floor)')
    for ax, (model, model_cells) in zip(axes, models.items()):
        here = _at_ctx(model_cells, ctx)
        groups, names = _ladder_order(model_cells)
        modes = list(dict.fromkeys(c['mode'] for c in model_cells))
        _bars(ax, groups, modes,
              lambda g, m: here[g, m]['step_ms_p50'] if (g, m) in here else None, names)
        floors = {g: c['t_floor_ms'] for (g, _), c in here.items() if c['t_floor_ms']}
        ax.scatter([groups.index(g) for g in floors], list(floors.values()), marker='_',
                   s=900, color='black', zorder=3)
        ax.set_ylabel('ms per step (median)')
        ax.set_title(model)
        ax.legend(fontsize='small')
        ax.grid(axis='y', alpha=0.3)
    return _save(plt, fig, path)


def plot_speedup(cells: Sequence[dict], path: Path) -> Optional[Path]:
    """Draw each mode's speedup over its baseline by context, with 95% CI error bars."""
    compared = [c for c in cells if c.get('speedup') is not None]
    if not compared:
        return None
    models = _by_model(compared)
    plt, fig, axes = _figure(len(models), 'speedup over the baseline mode, 95% bootstrap CI')
    for ax, (model, model_cells) in zip(axes, models.items()):
        style = _style(model_cells)
        for (label, mode), line in _series(model_cells, 'speedup').items():
            ys = [c['speedup'] for c in line]
            errors = [[y - c['ci95_lo'] for y, c in zip(ys, line)],
                      [c['ci95_hi'] - y for y, c in zip(ys, line)]]
            ax.errorbar([c['ctx'] for c in line], ys, yerr=errors, marker='o', capsize=4,
                        label=f'{label}: {mode} vs {line[0]["baseline"]}', **style(label, mode))
        ax.axhline(1.0, color='grey', linewidth=0.8)
        _context_axis(ax, model_cells)
        ax.set_ylabel('speedup (t_baseline / t_mode)')
        ax.set_title(model)
        _side_legend(ax)
        ax.grid(alpha=0.3)
    return _save(plt, fig, path)


def plot_cost(cells: Sequence[dict], path: Path) -> Optional[Path]:
    """Draw cost per million tokens by target at the reference context (priced ones only)."""
    priced = [c for c in cells if c.get('cost_per_mtok') is not None]
    ctx = reference_ctx(priced)
    if ctx is None:
        return None
    models = _by_model([c for c in priced if c['ctx'] == ctx])
    plt, fig, axes = _figure(len(models), f'cost per million tokens at context {ctx}, batch 1')
    for ax, (model, model_cells) in zip(axes, models.items()):
        here = _at_ctx(model_cells, ctx)
        modes = list(dict.fromkeys(c['mode'] for c in model_cells))
        groups, _ = _ladder_order(model_cells)
        prices = {c['label']: c['price_per_hour'] for c in model_cells}
        _bars(ax, groups, modes,
              lambda g, m: here[g, m]['cost_per_mtok'] if (g, m) in here else None,
              [f'{g}\n{prices[g]:g} USD/h' for g in groups])
        ax.set_ylabel('USD per million tokens')
        ax.set_title(model)
        ax.legend(fontsize='small')
        ax.grid(axis='y', alpha=0.3)
    return _save(plt, fig, path)


def _fmt(value, digits: int = 3) -> str:
    if value is None:
        return '-'
    if isinstance(value, float):
        return f'{value:.{digits}f}'
    return str(value)


def _sources_table(docs: Sequence[dict], files: Sequence[Path]) -> List[str]:
    lines = ['| file | target | B_peak GB/s | GPU / CPU | driver | torch | created (UTC) | '
             'status |', '|---|---|---|---|---|---|---|---|']
    for doc, file, label in zip(docs, files, _labels(docs)):
        machine, target = doc['machine'], doc['target']
        source = 'measured' if target['measured'] else 'datasheet'
        lines.append(
            f'| {Path(file).name} | {label} | {target["B_peak_gbs"]:g} ({source}) | '
            f'{machine.get("gpu") or machine.get("cpu")} | {machine.get("gpu_driver") or "-"} '
            f'| {machine["packages"].get("torch")} | {doc["created_utc"]} | {doc["status"]} |')
    return lines


def _cells_table(cells: Sequence[dict]) -> List[str]:
    lines = ['| model | target | mode (ran as) | ctx | ms/step p50 | t_floor ms | R_floor | '
             'tokens/s | speedup [95% CI] | launch fraction | $/Mtok |',
             '|---|---|---|---|---|---|---|---|---|---|---|']
    modes = list(dict.fromkeys(c['mode'] for c in cells))
    for c in sorted(cells, key=lambda c: (c['model'], c['B_peak_gbs'], c['label'],
                                          modes.index(c['mode']), c['ctx'])):
        ran = c['mode'] if c['backend'] == c['mode'] else f'{c["mode"]} ({c["backend"]})'
        speedup = '-' if c.get('speedup') is None else (
            f'{c["speedup"]:.3f} [{c["ci95_lo"]:.3f}, {c["ci95_hi"]:.3f}] vs {c["baseline"]}')
        lines.append(
            f'| {c["model"]} | {c["label"]} | {ran} | {c["ctx"]} | {_fmt(c["step_ms_p50"])} | '
            f'{_fmt(c["t_floor_ms"])} | {_fmt(c["R_floor"])} | {_fmt(c["tokens_per_s"], 1)} | '
            f'{speedup} | {_fmt(c.get("launch_fraction"))} | {_fmt(c.get("cost_per_mtok"))} |')
    return lines


def verify_lines(cells: Sequence[dict]) -> List[str]:
    """Return the section of cells with verify steps (physinf-bench --verify-k), or nothing."""
    speculative = [c for c in cells if c.get('verify')]
    if not speculative:
        return []
    lines = ['## Speculative decoding: verify steps', '',
             'Per cell, a verify step of k drafted tokens (k + 1 rows, one forward) against the '
             'plain step (k 0): t_verify(k) / t_step is what it costs in plain steps, the reply '
             'tokens per verify step it must average to pay off. With a draft model, the pair '
             'pays off at (t_verify(k) + k * t_draft) / t_step tokens per step.', '',
             '| model | target | mode (ran as) | ctx | k | ms p50 | ms p99 | '
             't_verify(k) / t_step = break-even tokens/step | draft model | draft ms p50 | '
             'pair break-even |',
             '|---|---|---|---|---|---|---|---|---|---|---|']
    for c in speculative:
        ran = c['mode'] if c['backend'] == c['mode'] else f'{c["mode"]} ({c["backend"]})'
        for row in c['verify']:
            lines.append(
                f'| {c["model"]} | {c["label"]} | {ran} | {c["ctx"]} | {row["k"]} | '
                f'{_fmt(row["ms_p50"])} | {_fmt(row["ms_p99"])} | {_fmt(row["ratio"])} | '
                f'{c.get("draft_model") or "-"} | {_fmt(c.get("draft_step_ms_p50"))} | '
                f'{_fmt(row["draft_break_even_tokens_per_step"])} |')
    return lines + ['']


def _read(files: Sequence[Path]) -> Tuple[List[Path], List[dict], List[dict], List[dict]]:
    # physinf-bench files (steps or --ttft) and physinf-attention files, told apart by their
    # schema.
    bench_files, docs, attention, first_tokens = [], [], [], []
    for file in files:
        schema = json.loads(Path(file).read_text()).get('schema')
        if schema == matrix.ATTENTION_SCHEMA:
            attention.append(json.loads(Path(file).read_text()))
        elif schema == ttft.SCHEMA:
            first_tokens.append(json.loads(Path(file).read_text()))
        else:
            bench_files.append(file)
            docs.append(results.read(file))
    return bench_files, docs, attention, first_tokens


def _matrix_lines(docs: Sequence[dict], cells: Sequence[dict], attention: Sequence[dict],
                  out_dir: Path) -> List[str]:
    unavailable = [u for d in docs for u in d.get('unavailable', [])]
    stacked = [c for c in cells if ':' in c['mode'] or c['model'].endswith(':gptq')]
    lines = []
    if stacked or unavailable:
        ctx = reference_ctx(stacked or cells)
        lines += ['## Software stacks: whole decode steps', ''] + matrix.stack_table(
            cells, unavailable, ctx) + ['']
        plot = matrix.plot_stacks(cells, ctx, out_dir / matrix.PLOT)
        if plot is not None:
            lines += [f'![ms per step by stack]({matrix.PLOT})', '']
    if attention:
        lines += ['## Software stacks: attention per layer', ''] + matrix.attention_table(
            attention) + ['']
    return lines


def render(files: Sequence[Path], out_dir: Path) -> Path:
    """Read results files and write report.md plus the PNG plots into out_dir."""
    files, docs, attention, first_tokens = _read([Path(f) for f in files])
    cells = rows(docs)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    drawn = {
        'r_floor': plot_r_floor(cells, out_dir / PLOTS['r_floor']),
        'ladder': plot_ladder(cells, out_dir / PLOTS['ladder']),
        'speedup': plot_speedup(cells, out_dir / PLOTS['speedup']),
        'cost': plot_cost(cells, out_dir / PLOTS['cost']),
    }
    lines = ['# physinf_ros benchmark report', '',
             'Batch-1 decode, per cell: warm-up steps, then the median of the measured steps '
             "over fresh sessions (see each file's `protocol`). R_floor = t_floor / t_step "
             'with t_floor = (W + K) / B_peak. Targets marked "B measured" had no datasheet '
             'entry: their B_peak is a measured device-copy bandwidth.', '',
             '## Sources', ''] + _sources_table(docs, files) + [
             '', '## Cells', ''] + _cells_table(cells) + [''] + verify_lines(cells) + \
        _matrix_lines(docs, cells, attention, out_dir) + ttft.report_lines(first_tokens) + [
                 '## Plots', '']
    captions = {'r_floor': 'R_floor by context', 'ladder': 'ms per step by target (ladder)',
                'speedup': 'speedup with 95% CI', 'cost': 'cost per million tokens'}
    for key, path in drawn.items():
        if path is None:
            lines.append(f'- {captions[key]}: not drawn, {MISSING[key]}.')
        else:
            lines.append(f'![{captions[key]}]({path.name})')
        lines.append('')
    report = out_dir / 'report.md'
    report.write_text('\n'.join(lines))
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog='physinf-report',
        description='Turn physinf-bench results files (one per target) into report.md and '
                    'PNG plots: R_floor by context, ms/step ladder, A/B speedup with 95% CI, '
                    'cost per million tokens.')
    parser.add_argument('files', nargs='+', type=Path, help='results JSON files')
    parser.add_argument('--out', type=Path, required=True, help='folder for report.md and PNGs')
    args = parser.parse_args(argv)
    try:
        report = render(args.files, args.out)
    except (OSError, ValueError, KeyError) as exc:
        print(f'[physinf] error: {exc}', file=sys.stderr)
        return 2
    print(f'wrote {report}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
