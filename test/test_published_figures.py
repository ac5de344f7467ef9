"""
The figures README and docs publish equal the results files they name, as those files round.

A figure that drifts from its file (a re-run that changed one, a hand edit) fails here; a
results file replaced without its figures being updated fails too.
"""

import json
from pathlib import Path
import re

import pytest

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / 'benchmarks' / 'results' / 'h200'
NUMBER = re.compile(r'[-+]?\d+(?:\.\d+)?')


def load(path):
    return json.loads(Path(path).read_text())


def row(document, label):
    """Return the cells after the first of the table row whose first cell starts with label."""
    for line in (ROOT / document).read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        if line.startswith('|') and cells[0].startswith(label):
            return cells[1:]
    raise AssertionError(f'no row {label!r} in {document}')


def numbers(cell):
    """Return the numbers of a cell, as written (with the digits shown)."""
    return NUMBER.findall(cell.replace('*', ''))


def assert_rounds_to(shown, value, what):
    """Check that shown (a string) is value rounded to the digits it shows."""
    digits = len(shown.split('.')[1]) if '.' in shown else 0
    assert abs(float(shown) - value) <= 0.5 * 10 ** -digits + 1e-9, \
        f'{what}: published {shown}, the file has {value}'


def cell(cells, model, backend, ctx):
    found = [c for c in cells if (c['model'], c['backend'], c['ctx']) == (model, backend, ctx)]
    assert len(found) == 1, (model, backend, ctx)
    return found[0]


@pytest.mark.parametrize('label, backend', [
    ('`hf`', 'hf'), ('`hf-graphed`', 'hf-graphed'), ('`eager`', 'eager'),
    ('`graphed`', 'graphed')])
def test_readme_measured_table_is_engine_compare(label, backend):
    cells = load(H200 / 'engine_compare.json')['cells']
    for text, ctx in zip(row('README.md', label), (2048, 16384)):
        step_ms, ratio = numbers(text)
        found = cell(cells, 'synthetic:llama-3.1-8b', backend, ctx)
        assert_rounds_to(step_ms, found['step_ms_median'], f'{backend} at {ctx}')
        assert_rounds_to(ratio, found['r_floor'], f'{backend} R_floor at {ctx}')
    floor = row('README.md', 'memory floor t_floor')
    for text, ctx in zip(floor, (2048, 16384)):
        found = cell(cells, 'synthetic:llama-3.1-8b', backend, ctx)
        assert_rounds_to(numbers(text)[0], found['t_floor_ms'], f't_floor at {ctx}')


@pytest.mark.parametrize('label, model', [
    ('`graphed`, 4-bit', 'synthetic:llama-3.1-8b:gptq'),
    ('`graphed`, the same model in bf16', 'synthetic:llama-3.1-8b')])
def test_readme_quantised_table_is_engine_compare_q4(label, model):
    cells = load(H200 / 'engine_compare_q4.json')['cells']
    for text, ctx in zip(row('README.md', label), (2048, 4096, 8192, 16384)):
        step_ms, ratio = numbers(text)
        found = cell(cells, model, 'graphed', ctx)
        assert_rounds_to(step_ms, found['step_ms_median'], f'{label} at {ctx}')
        assert_rounds_to(ratio, found['r_floor'], f'{label} R_floor at {ctx}')


def node_overhead():
    return {s['shape']: s for s in load(H200 / 'node_overhead.json')['shapes']}


def test_readme_node_overhead_is_node_overhead_json():
    shapes = node_overhead()
    text = ' '.join((ROOT / 'README.md').read_text().split())
    big, small = shapes['llama-3.1-8b'], shapes['smollm2-135m']
    published = re.search(r'every ([\d.]+) ms on average .*? step of ([\d.]+) ms .*? '
                          r'\(overhead ([-+][\d.]+)%.*? every ([\d.]+) ms against ([\d.]+) ms'
                          r' .*? \(([-+][\d.]+)%\)', text)
    assert published, 'the node overhead paragraph of README.md'
    mean8, step8, over8, mean135, step135, over135 = published.groups()
    assert_rounds_to(mean8, big['subscriber_mean_interval_ms'], '8B interval')
    assert_rounds_to(step8, big['engine_mean_step_ms'], '8B step')
    assert_rounds_to(over8, 100 * big['overhead'], '8B overhead %')
    assert_rounds_to(mean135, small['subscriber_mean_interval_ms'], '135M interval')
    assert_rounds_to(step135, small['engine_mean_step_ms'], '135M step')
    assert_rounds_to(over135, 100 * small['overhead'], '135M overhead %')


@pytest.mark.parametrize('label, shape', [('Llama-3.1-8B', 'llama-3.1-8b'),
                                          ('SmolLM2-135M', 'smollm2-135m')])
def test_perf_node_overhead_table_is_node_overhead_json(label, shape):
    found = node_overhead()[shape]
    # The last table of docs/PERF.md with this row is run 25's, the file's.
    rows = [line for line in (ROOT / 'docs' / 'PERF.md').read_text().splitlines()
            if line.startswith(f'| {label} |')]
    step, node_step, mean, p50, overhead = numbers(' '.join(rows[-1].split('|')[2:]))
    assert_rounds_to(step, found['engine_mean_step_ms'], 'engine step')
    assert_rounds_to(node_step, found['node_mean_step_latency_ms'], 'node step_latency')
    assert_rounds_to(mean, found['subscriber_mean_interval_ms'], 'interval mean')
    assert_rounds_to(p50, found['subscriber_p50_interval_ms'], 'interval p50')
    assert_rounds_to(overhead, 100 * found['overhead'], 'overhead %')


def test_reliability_stored_run_sentence_is_its_file():
    figures = load(ROOT / 'benchmarks' / 'results' / 'dev' / 'reliability_figures.json')
    figures = figures['figures']
    text = ' '.join((ROOT / 'docs' / 'RELIABILITY.md').read_text().split())
    published = re.search(r'answered 500 of 500 in ([\d.]+)-([\d.]+) s idle and '
                          r'([\d.]+)-([\d.]+) s while decoding, a second decoder of a name '
                          r'exited 1 after ([\d.]+) s, and Ctrl-C mid-generation exited 0 in '
                          r'([\d.]+) s', text)
    assert published, 'the stored-run sentence of docs/RELIABILITY.md'
    idle = [v['seconds'] for k, v in figures.items() if k.startswith('service burst')
            and k.endswith('idle')]
    busy = [v['seconds'] for k, v in figures.items() if k.startswith('service burst')
            and k.endswith('decoding')]
    assert all(v['answered'] == v['calls'] for k, v in figures.items()
               if k.startswith('service burst'))
    low_idle, high_idle, low_busy, high_busy, second, ctrl_c = published.groups()
    assert_rounds_to(low_idle, min(idle), 'idle min')
    assert_rounds_to(high_idle, max(idle), 'idle max')
    assert_rounds_to(low_busy, min(busy), 'decoding min')
    assert_rounds_to(high_busy, max(busy), 'decoding max')
    assert_rounds_to(second, figures['one decoder per name: a second one starts']
                     ['seconds_to_exit'], 'second decoder')
    assert_rounds_to(ctrl_c, figures['ctrl-c mid-generation']['seconds'], 'Ctrl-C')


def test_readme_cpu_figures_are_cpu_embedded_json():
    cells = {c['mode']: c for c in load(ROOT / 'benchmarks' / 'results' / 'dev'
                                        / 'cpu_embedded.json')['cells']}
    text = ' '.join((ROOT / 'README.md').read_text().split())
    published = re.search(r'took ([\d.]+) ms per step on `hf` and ([\d.]+) ms on `eager`', text)
    assert published, 'the CPU sentence of README.md'
    assert_rounds_to(published.group(1), cells['hf']['step_ms_p50'], 'hf on the CPU')
    assert_rounds_to(published.group(2), cells['eager']['step_ms_p50'], 'eager on the CPU')
