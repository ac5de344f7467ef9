"""
The paper's software-stack tables, ours beside theirs, for physinf-report.

Two tables: decode attention per layer (physinf-attention files) against the paper's H100
figures, and whole decode steps by stack (physinf-bench files whose modes carry a stack, our
GPTQ and exllamav2 on a `:gptq` model, and the plain bf16 backends) against the paper's L4
figures. The paper's figures come from config/paper.yaml, marked as theirs; a stack that did not
run is listed with the reason its results file gives.
"""

from typing import Dict, List, Optional, Sequence

import yaml

from ..engine.decoders.backends import split, stack_of
from ..engine.decoders.stacks import Attention
from ..measurement.stats import bootstrap_mean_ci
from ..resources import config_path

ATTENTION_SCHEMA = 'physinf_ros.attention'
PLOT = 'stacks_ms_per_step.png'
# Which of the paper's quantisation rows a measured row stands beside.
DTYPE_SHORT = {'bfloat16': 'bf16', 'float16': 'fp16', 'float32': 'fp32'}
PAPER_ROW = {'bf16': 'bf16', 'bnb-nf4': 'bnb-nf4', 'awq-marlin': 'awq-marlin',
             'gptq on exllamav2': 'gptq-exllamav2'}


def paper_figures() -> Dict[str, object]:
    """Return config/paper.yaml: the paper's attention and quantisation figures."""
    return yaml.safe_load(config_path('paper.yaml').read_text())


def weights(model: str, mode: str, dtype: str) -> str:
    """Return the weight format a cell ran with ('bf16', 'bnb-nf4', 'gptq on exllamav2', ...)."""
    stack = stack_of(mode)
    if stack is not None and not isinstance(stack, Attention):
        return stack.name
    base = split(mode)[0]
    if 'gptq' in model.lower():   # the spec's :gptq, or the loaded model's name
        return 'gptq on exllamav2' if base.startswith('exllamav2') else f'gptq on {base}'
    return DTYPE_SHORT.get(dtype, dtype)


def _ci(cell: dict) -> str:
    mean, low, high = bootstrap_mean_ci(cell['session_median_ms'])
    return f'{mean:.3f} [{low:.3f}, {high:.3f}]'


def _gb(value) -> str:
    return '-' if value is None else f'{value / 1e9:.2f}'


def _r(value) -> str:
    return '-' if value is None else f'{value:.3f}'


def stack_cells(cells: Sequence[dict], ctx: int) -> List[dict]:
    """Return the cells at ctx that the stack table shows: every mode, stacks and plain."""
    return [c for c in cells if c['ctx'] == ctx and 'session_median_ms' in c]


def stack_table(cells: Sequence[dict], unavailable: Sequence[dict], ctx: int) -> List[str]:
    """Return the whole-step table by stack at ctx, with the paper's L4 figures beside."""
    paper = paper_figures()['quantisation']
    lines = [f'Whole decode steps at ctx {ctx}, by stack: ms/step is the median of all '
             'measured steps; the interval is the mean of the session medians with its 95% '
             'bootstrap CI over sessions. W is the weight bytes a step reads in that format. '
             f'The paper column is theirs ({paper_figures()["source"]}; an {paper["target"]}, '
             'not this machine).', '',
             '| model | mode | weights | attention | ms/step | mean [95% CI] | W GB | '
             f'R_floor | paper {paper["target"]} ms |', '|---|---|---|---|---|---|---|---|---|']
    for c in sorted(stack_cells(cells, ctx), key=lambda c: (c['model'], c['step_ms_p50'])):
        stack = stack_of(c['mode'])
        attention = stack.name if isinstance(stack, Attention) else \
            'sdpa' if split(c['mode'])[0].startswith('hf') else 'its own'
        fmt = weights(c['model'], c['mode'], c['dtype'])
        # The paper's steps ran SDPA: its figure stands beside our rows that did too.
        theirs = paper['ms_per_step'].get(PAPER_ROW.get(fmt, '')) if attention == 'sdpa' \
            else None
        lines.append(f'| {c["model"]} | {c["mode"]} | {fmt} | {attention} | '
                     f'{c["step_ms_p50"]:.3f} | {_ci(c)} | {_gb(c["W_bytes"])} | '
                     f'{_r(c["R_floor"])} | {theirs if theirs is not None else "-"} |')
    for entry in unavailable:
        fmt = weights('', entry['mode'], 'bfloat16')
        attention = isinstance(stack_of(entry['mode']), Attention)
        theirs = None if attention else paper['ms_per_step'].get(PAPER_ROW.get(fmt, ''))
        lines.append(f'| - | {entry["mode"]} | not measured: {entry["reason"]} | | | | | | '
                     f'{theirs if theirs is not None else "-"} |')
    return lines


def attention_table(docs: Sequence[dict]) -> List[str]:
    """Return the per-layer attention table of physinf-attention files, the paper's beside."""
    paper = paper_figures()['attention']
    contexts = sorted({c['ctx'] for d in docs for c in d['cells']})
    lines = ['Decode attention of one layer (batch 1, the 8B GQA shape), us per call: median '
             '[p10, p90] over graph replays. The paper column is theirs '
             f'({paper_figures()["source"]}; an {paper["target"]} at ctx {paper["ctx"]}).', '',
             '| backend | ' + ' | '.join(f'ctx {ctx}' for ctx in contexts)
             + f' | paper {paper["target"]} ctx {paper["ctx"]} |',
             '|---|' + '---|' * (len(contexts) + 1)]
    failed = {(u['backend'], u['ctx']): u['reason'] for d in docs
              for u in d.get('unavailable', []) if 'ctx' in u}
    backends = list(dict.fromkeys([c['backend'] for d in docs for c in d['cells']]
                                  + [backend for backend, _ in failed]))
    for backend in backends:
        row = []
        for ctx in contexts:
            found = [c for d in docs for c in d['cells']
                     if c['backend'] == backend and c['ctx'] == ctx]
            row.append(f'not measured: {failed[backend, ctx]}' if (backend, ctx) in failed
                       else '-' if not found else (
                           f'{found[0]["us_per_layer_p50"]:.2f} '
                           f'[{found[0]["us_per_layer_p10"]:.2f}, '
                           f'{found[0]["us_per_layer_p90"]:.2f}]'))
        theirs = paper['us_per_layer'].get(backend)
        lines.append(f'| {backend} | ' + ' | '.join(row)
                     + f' | {theirs if theirs is not None else "-"} |')
    for d in docs:
        for entry in d.get('unavailable', []):
            if 'ctx' in entry:
                continue
            theirs = paper['us_per_layer'].get(entry['backend'])
            lines.append(f'| {entry["backend"]} | not measured: {entry["reason"]} '
                         + '| ' * (len(contexts) - 1)
                         + f'| {theirs if theirs is not None else "-"} |')
    return lines


def plot_stacks(cells: Sequence[dict], ctx: int, path) -> Optional[object]:
    """Draw ms/step per stack at ctx as horizontal bars; None when there is nothing to draw."""
    shown = sorted(stack_cells(cells, ctx), key=lambda c: c['step_ms_p50'], reverse=True)
    if len(shown) < 2:
        return None
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(shown) + 1.5))
    labels = [f'{c["mode"]} ({c["model"].split(":")[-1]})' for c in shown]
    ax.barh(labels, [c['step_ms_p50'] for c in shown], color='tab:blue')
    ax.set_xlabel(f'ms per decode step at ctx {ctx} (median)')
    ax.set_title('Decode step by software stack')
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
