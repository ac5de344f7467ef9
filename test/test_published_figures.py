"""
The figures README and docs publish equal the results files they name, as those files round.

A figure that drifts from its file (a re-run that changed one, a hand edit) fails here; a
results file replaced without its figures being updated fails too.
"""

import json
from pathlib import Path
import re

from benchmark_scripts import benchmark_script
import pytest

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / 'benchmarks' / 'results' / 'h200'
H100_FAMILIES = ROOT / 'benchmarks' / 'results' / 'h100' / 'families'
NUMBER = re.compile(r'[-+]?\d+(?:\.\d+)?')
# Our graphed 4-bit 8B as published: the protocol at v36 (commit 2a76128).
GPTQ_GRAPHED = 'gptq_graphed.json'
README = 'README.md'
BENCHMARK = 'docs/BENCHMARK.md'
QUANTISED = 'docs/QUANTISED.md'
STACKS = 'docs/STACKS.md'


def load(path):
    return json.loads(Path(path).read_text())


def row(document, label, after=''):
    """Return the cells after the first table row whose first cell starts with label."""
    text = (ROOT / document).read_text()
    for line in text[text.index(after):].splitlines():
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        if line.startswith('|') and cells[0].startswith(label):
            return cells[1:]
    raise AssertionError(f'no row {label!r} in {document}')


def flat_text(document):
    """Return a document's text with its line breaks and runs of spaces as single spaces."""
    return ' '.join((ROOT / document).read_text().split())


def numbers(cell):
    """Return the numbers of a cell, as written (with the digits shown)."""
    return NUMBER.findall(cell.replace('*', ''))


def assert_rounds_to(shown, value, what):
    """Check that shown (a string) is value rounded to the digits it shows."""
    digits = len(shown.split('.')[1]) if '.' in shown else 0
    assert abs(float(shown) - value) <= 0.5 * 10 ** -digits + 1e-9, \
        f'{what}: published {shown}, the file has {value}'


def assert_step_cell(cell, found, what):
    """Check a 'step ms (R_floor)' cell against its protocol cell: both figures, as rounded."""
    step_ms, ratio = numbers(cell)
    assert_rounds_to(step_ms, found['step_ms_p50'], f'{what} step')
    assert_rounds_to(ratio, found['R_floor'], f'{what} R_floor')


def protocol_cell(file, mode, ctx):
    found = [c for c in load(H200 / file)['cells'] if (c['mode'], c['ctx']) == (mode, ctx)]
    assert len(found) == 1, (file, mode, ctx)
    return found[0]


def headline_row(model, backend):
    """Return the ctx 2048 and 16384 cells of README's headline row, and the file it names."""
    text = (ROOT / README).read_text()
    for line in text[text.index('## Measured'):].splitlines():
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        if line.startswith('|') and cells[0] == model and cells[1].startswith(backend):
            *figures, file = cells[2:]
            return cells[1], figures, file.strip('`')
    raise AssertionError(f'no headline row {model!r}, {backend!r} in {README}')


@pytest.mark.parametrize('model, backend, file, mode', [
    ('Llama-3.1-8B, bf16', '`graphed`', 'graphed_llama-3.1-8b.json', 'graphed'),
    ('Llama-3.1-8B, bf16', '`eager`', 'protocol_llama-3.1-8b.json', 'eager'),
    ('Llama-3.1-8B, bf16', '`hf-graphed`', 'protocol_llama-3.1-8b.json', 'hf-graphed'),
    ('Llama-3.1-8B, bf16', '`hf`', 'protocol_llama-3.1-8b.json', 'hf'),
    ('Llama-3.1-8B, GPTQ 4-bit', '`graphed`', GPTQ_GRAPHED, 'graphed'),
    ('Llama-3.1-8B, GPTQ 4-bit', '`exllamav2`', 'stacks_gptq.json', 'exllamav2')])
def test_readme_headline_rows_are_their_files(model, backend, file, mode):
    _, figures, named = headline_row(model, backend)
    assert named == file, f'{model}, {backend}: the row names {named}'
    for text, ctx in zip(figures, (2048, 16384)):
        step_ms, ratio = numbers(text)
        found = protocol_cell(file, mode, ctx)
        assert_rounds_to(step_ms, found['step_ms_p50'], f'{model} {mode} at {ctx}')
        assert_rounds_to(ratio, found['R_floor'], f'{model} {mode} R_floor at {ctx}')


def test_readme_headline_session_counts_are_their_files():
    published = re.search(r'(\d+) fresh sessions per cell for the bf16 8B, (\d+) for the others',
                          flat_text(README))
    assert published, 'the protocol sentence above the headline table'
    bf16, others = (int(n) for n in published.groups())
    text = (ROOT / README).read_text()
    named = set(re.findall(r'`([\w.-]+\.json)` \|$', text[text.index('## Measured'):],
                           re.MULTILINE))
    assert len(named) == 7, named
    for file in named:
        bf16_8b = file in ('protocol_llama-3.1-8b.json', 'graphed_llama-3.1-8b.json')
        sessions = load(H200 / file)['protocol']['sessions']
        assert sessions == (bf16 if bf16_8b else others), f'{file}: {sessions} sessions'


@pytest.mark.parametrize('model, files', [
    ('Llama-3.1-8B, bf16', ('protocol_llama-3.1-8b.json', 'graphed_llama-3.1-8b.json')),
    ('Llama-3.1-8B, GPTQ 4-bit', (GPTQ_GRAPHED, 'stacks_gptq.json'))])
def test_readme_headline_floors_are_their_files(model, files):
    _, figures, named = headline_row(model, 'memory floor t_floor')
    assert named == files[0], f'{model}: the floor row names {named}'
    for text, ctx in zip(figures, (2048, 16384)):
        for file in files:   # one floor: every run of this model has it
            found = protocol_cell(file, 'graphed', ctx)
            assert_rounds_to(numbers(text)[0], found['t_floor_ms'], f'{model} t_floor at {ctx}')


@pytest.mark.parametrize('model, shape', [('Llama-3.2-1B, bf16', 'llama-3.2-1b'),
                                          ('Qwen2.5-1.5B, bf16', 'qwen2.5-1.5b'),
                                          ('Llama-3.2-3B, bf16', 'llama-3.2-3b')])
def test_readme_robot_rows_are_their_files(model, shape):
    backend, (short, long), named = headline_row(model, '`graphed`')
    file = f'robots_{shape}.json'
    assert named == file, f'{model}: the row names {named}'
    assert long == '-', 'the robot shapes were measured at ctx 2048 only'
    found = protocol_cell(file, 'graphed', 2048)
    assert_rounds_to(numbers(backend)[0], found['t_floor_ms'], f'{shape} t_floor')
    step_ms, ratio = numbers(short)
    assert_rounds_to(step_ms, found['step_ms_p50'], f'{shape} graphed')
    assert_rounds_to(ratio, found['R_floor'], f'{shape} R_floor')


@pytest.mark.parametrize('label, mode', [
    ('`hf`', 'hf'), ('`hf-graphed`', 'hf-graphed'), ('`eager`', 'eager'),
    ('`graphed`', 'graphed')])
def test_benchmark_protocol_table_is_the_protocol_run(label, mode):
    for text, ctx in zip(row(BENCHMARK, label, after='## Results files'), (2048, 16384)):
        step_ms, ratio = numbers(text)
        found = protocol_cell('protocol_llama-3.1-8b.json', mode, ctx)
        assert_rounds_to(step_ms, found['step_ms_p50'], f'{mode} at {ctx}')
        assert_rounds_to(ratio, found['R_floor'], f'{mode} R_floor at {ctx}')
    floors = row(BENCHMARK, 'memory floor t_floor', after='## Results files')
    for text, ctx in zip(floors, (2048, 16384)):
        found = protocol_cell('protocol_llama-3.1-8b.json', mode, ctx)
        assert_rounds_to(numbers(text)[0], found['t_floor_ms'], f't_floor at {ctx}')


@pytest.mark.parametrize('label, file, mode', [
    ('`graphed`, 4-bit', GPTQ_GRAPHED, 'graphed'),
    ('`graphed`, the same model in bf16', 'graphed_llama-3.1-8b.json', 'graphed'),
    ('`exllamav2` (stock)', 'stacks_gptq.json', 'exllamav2')])
def test_quantised_table_is_the_protocol_run(label, file, mode):
    *figures, named = row(QUANTISED, label)
    assert named == f'`{file}`', f'{label}: the row names {named}'
    for text, ctx in zip(figures, (2048, 16384)):
        step_ms, ratio = numbers(text)
        found = protocol_cell(file, mode, ctx)
        assert_rounds_to(step_ms, found['step_ms_p50'], f'{label} at {ctx}')
        assert_rounds_to(ratio, found['R_floor'], f'{label} R_floor at {ctx}')


def test_quantised_floor_is_the_protocol_run():
    *figures, named = row(QUANTISED, 't_floor (W 4.65 GB')
    assert named == f'`{GPTQ_GRAPHED}`', named
    for text, ctx in zip(figures, (2048, 16384)):
        for file in (GPTQ_GRAPHED, 'stacks_gptq.json'):   # one floor, both runs
            found = protocol_cell(file, 'graphed', ctx)
            assert_rounds_to(text.split()[0], found['t_floor_ms'], f'4-bit t_floor at {ctx}')


def test_quantised_gptq_sentence_is_its_file():
    published = re.search(r'4-bit kernels in \*\*([\d.]+) ms\*\* at ctx 2048 and ([\d.]+) ms at '
                          r'16384 \(R_floor ([\d.]+)-([\d.]+)', flat_text(QUANTISED))
    assert published, 'the 4-bit sentence of docs/QUANTISED.md'
    short, long, r_short, r_long = published.groups()
    for step, ratio, ctx in ((short, r_short, 2048), (long, r_long, 16384)):
        found = protocol_cell(GPTQ_GRAPHED, 'graphed', ctx)
        assert_rounds_to(step, found['step_ms_p50'], f'4-bit graphed at {ctx}')
        assert_rounds_to(ratio, found['R_floor'], f'4-bit R_floor at {ctx}')


def paired_rows(folder):
    """Return benchmarks/paired_summary.py's rows for a paired folder, by (model tag, ctx)."""
    rows = benchmark_script('paired_summary').summarise(H200 / folder)
    return {(r['model'], r['ctx']): r for r in rows}


# folder: (the sentence above its table in docs/BENCHMARK.md, pairs per cell: rounds x 3 sessions)
PAIRED_TABLES = {'paired_s7': ('v9 (attention reads its first cached keys', 6),
                 'paired_s15': ('v19, the norm GEMVs', 6)}


@pytest.mark.parametrize('folder, label, shape', [
    *[('paired_s7', label, shape) for label, shape in [
        ('Llama-3.2-1B', 'llama-3.2-1b'), ('Qwen2.5-1.5B', 'qwen2.5-1.5b'),
        ('Llama-3.1-8B, bf16', 'llama-3.1-8b'), ('Llama-3.1-8B, GPTQ', 'llama-3.1-8b-gptq')]],
    *[('paired_s15', label, shape) for label, shape in [
        ('Llama-3.2-1B', 'llama-3.2-1b'), ('Qwen2.5-1.5B', 'qwen2.5-1.5b'),
        ('Llama-3.2-3B', 'llama-3.2-3b'), ('Llama-3.1-8B, bf16', 'llama-3.1-8b'),
        ('Llama-3.1-8B, GPTQ', 'llama-3.1-8b-gptq')]]])
def test_benchmark_paired_table_is_its_files(folder, label, shape):
    rows = paired_rows(folder)
    sentence, pairs = PAIRED_TABLES[folder]
    cells = row(BENCHMARK, label, after=sentence)
    for text, ctx in zip(cells, (2048, 16384)):
        before, after = numbers(text)
        found = rows[(shape, ctx)]
        assert found['pairs'] == pairs, found
        assert_rounds_to(before, found['base_ms'], f'{shape} base at {ctx}')
        assert_rounds_to(after, found['new_ms'], f'{shape} new at {ctx}')


def test_benchmark_cuda_q4_paired_table_and_ratios_are_their_files():
    rows = paired_rows('paired_s9')
    cells = row(BENCHMARK, 'Llama-3.1-8B, GPTQ', after='v11b, the 4-bit GEMVs in CUDA')
    text = flat_text(BENCHMARK)
    ratios = re.search(r'new / base ([\d.]+) \[([\d.]+), ([\d.]+)\] at ctx 2048 and ([\d.]+) '
                       r'\[([\d.]+), ([\d.]+)\] at 16384', text)
    assert ratios, 'the paired_s9 sentence of docs/BENCHMARK.md'
    shown_per_ctx = (ratios.groups()[:3], ratios.groups()[3:])
    for cell_text, ctx, shown in zip(cells, (2048, 16384), shown_per_ctx):
        before, after = numbers(cell_text)
        found = rows[('llama-3.1-8b-gptq', ctx)]
        assert found['pairs'] == 6, found
        assert_rounds_to(before, found['base_ms'], f'4-bit base at {ctx}')
        assert_rounds_to(after, found['new_ms'], f'4-bit new at {ctx}')
        for value, figure in zip(shown, [found['ratio'], *found['ratio_ci95']]):
            assert_rounds_to(value, figure, f'4-bit new / base [95% CI] at {ctx}')


def node_overhead():
    return {s['shape']: s for s in load(H200 / 'node_overhead.json')['shapes']}


def test_decoder_node_overhead_is_node_overhead_json():
    shapes = node_overhead()
    text = flat_text('docs/DECODER_NODE.md')
    big, small = shapes['llama-3.1-8b'], shapes['smollm2-135m']
    published = re.search(r'every ([\d.]+) ms on average .*? step of ([\d.]+) ms .*? '
                          r'\(overhead ([-+][\d.]+)%.*? every ([\d.]+) ms against ([\d.]+) ms'
                          r' .*? \(([-+][\d.]+)%\)', text)
    assert published, 'the node overhead paragraph of docs/DECODER_NODE.md'
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
    # The table of the section "The node at engine speed" is run 25's, the file's.
    cells = row('docs/PERF.md', label, after='## The node at engine speed')
    step, node_step, mean, p50, overhead = numbers(' '.join(cells))
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
    text = flat_text(README)
    published = re.search(r'took ([\d.]+) ms per step on `hf` and ([\d.]+) ms on `eager`', text)
    assert published, 'the CPU sentence of README.md'
    assert_rounds_to(published.group(1), cells['hf']['step_ms_p50'], 'hf on the CPU')
    assert_rounds_to(published.group(2), cells['eager']['step_ms_p50'], 'eager on the CPU')


RELIABILITY = ROOT / 'docs' / 'RELIABILITY.md'
# A number as a figure shows it: not digits inside a word (p50, H200, UTF-8); a range such as
# 0.22-0.74 shows two.
FIGURE = re.compile(r'(?<![\w.-])[-+]?\d+(?:\.\d+)?|(?<=\d-)\d+(?:\.\d+)?')
# Quoted text and code in a figure cell are checked as text, not as numbers.
TEXT = re.compile(r'"([^"]*)"|`[^`]*`')


def table_cells(line):
    """Split a markdown table row at the pipes outside code spans."""
    cells, cell, code = [], '', False
    for char in line.strip()[1:-1]:
        if char == '`':
            code = not code
        if char == '|' and not code:
            cells.append(cell.strip())
            cell = ''
        else:
            cell += char
    return cells + [cell.strip()]


def reliability_table():
    """Return {issue item: (figure measured, stored in)} of RELIABILITY.md's summary table."""
    lines = RELIABILITY.read_text().splitlines()
    header = lines.index('| issue item | what happens | figure measured | stored in | test |')
    table = {}
    for line in lines[header + 2:]:
        if not line.startswith('|'):
            break
        label, _, figure, stored, _ = table_cells(line)
        table[label] = figure, stored
    return table


def only(values):
    """Return the one value that all of values share."""
    values = set(values)
    assert len(values) == 1, values
    return values.pop()


def oom_on_the_h200(log):
    assert 'test_capture_out_of_memory_falls_back_to_eager_on_cuda' in log
    assert '"backend": "eager", "note": "CUDA graph capture ran out of memory' in log
    assert 'failed' not in log.splitlines()[-1]
    return [int(re.match(r'# run (\d+)', log).group(1)),
            int(re.search(r'^(\d+) passed', log, re.MULTILINE).group(1))]


def bursts(r, key, when):
    return [v[key] for k, v in r.items() if k.endswith(f' while {when}')]


def tiny_temperatures(r):
    record = r['tiny temperatures']
    assert only(record['replies']) == record['greedy'], "both replies are greedy's"
    return []


def second_decoder(r):
    record = r['one decoder per name: a second one starts']
    assert record['caught'] == 'at start', 'the check at start caught it'
    return [record['seconds_to_exit'], record['heard_first_after_s']]


# The figures of each row of RELIABILITY.md's table, in the order the row shows them, from the
# records its "stored in" cell names (r holds those records and no others; a log's whole text).
# Quoted text in a figure cell must appear in those records.
RELIABILITY_FIGURES = {
    '1. empty / whitespace prompt': lambda r: [
        r['bad input: empty']['reject_ms'], r['bad input: whitespace']['reject_ms']],
    '1. prompt longer than `max_context`': lambda r: [
        r['bad input: longer than max_context']['reject_ms']],
    '1. same, `truncate_prompt: true`': lambda r: [
        r['truncate_prompt']['limit'], r['truncate_prompt']['tokens']],
    '1. 2 MB payload': lambda r: [r['bad input: 2 MB payload']['reject_ms']],
    '1. control characters': lambda r: [r['bad input: control characters only']['reject_ms']],
    '1. invalid text': lambda r: [r['bad input: invalid UTF-8 bytes']['reject_ms'],
                                  r['bad input: U+FFFD in the text']['reject_ms']],
    '1. reply that is end-of-sequence at once': lambda r: [
        r['end of sequence at once']['ttft_ms']],
    '2. 1000 prompts at once': lambda r: [r['flood'][k] for k in (
        'prompts', 'accepted', 'max_queue_position', 'rejected', 'finished', 'errors',
        'settled_s', 'rss_mib_before', 'rss_mib_after', 'rss_change_pct', 'threads_before',
        'threads_after')],
    '3. cancel mid-stream': lambda r: [
        only(run['steps_after_cancel'] for run in r['cancel mid-stream']['runs']),
        len(r['cancel mid-stream']['runs']),
        min(run['cancel_ms'] for run in r['cancel mid-stream']['runs']),
        max(run['cancel_ms'] for run in r['cancel mid-stream']['runs']),
        r['soak']['start']['step_ms_p50']],
    '3. cancel while queued': lambda r: [],
    '12.1 an action client that vanishes mid-stream': lambda r: [
        r['action client vanished (SIGINT)']['seconds_to_cancel'],
        r['action client vanished (SIGINT)']['tokens'],
        r['action client vanished (SIGKILL)']['seconds_to_cancel']],
    '12.2 tiny temperatures': tiny_temperatures,
    '12.5 a 1 MB `system_prompt`': lambda r: [],
    '12.3 bursts of service calls': lambda r: [
        only(v['answered'] for v in r.values()), only(v['calls'] for v in r.values()),
        min(bursts(r, 'seconds', 'idle')), max(bursts(r, 'seconds', 'idle')),
        min(bursts(r, 'seconds', 'decoding')), max(bursts(r, 'seconds', 'decoding')),
        only(v['bound_s'] for v in r.values())],
    '12.4 a second decoder of the same name': second_decoder,
    '12.4 two decoders of one name started at once': lambda r: [
        r['one decoder per name: two at once']['loser_heard_winner_after_s'],
        r['one decoder per name: two at once']['winner_wait_s']],
    '4. valid parameter at run time': lambda r: [
        r['parameters at run time']['running_request_tokens'],
        r['parameters at run time']['next_request_tokens']],
    '5. missing model path': lambda r: [r['startup fault: missing model file']['seconds']],
    '5. corrupt config.json': lambda r: [r['startup fault: corrupt config.json']['seconds']],
    '5. corrupt or missing params YAML': lambda r: [
        r['startup fault: corrupt params YAML']['seconds'],
        r['startup fault: missing params file']['seconds'],
        r['startup fault: wrongly typed parameter in YAML']['seconds']],
    '5. CUDA OOM at graph capture': oom_on_the_h200,
    '5. subscriber killed mid-stream': lambda r: [r['subscriber killed mid-stream'][k] for k in (
        'listener_tokens', 'tokens', 'tokens_per_s_before_kill', 'tokens_per_s_after_kill')],
    '5. Ctrl-C mid-generation': lambda r: [r['ctrl-c mid-generation']['seconds']],
    '6. soak, 200 back-to-back requests': lambda r: [
        r['soak'][part][name] for name in ('ttft_ms_p50', 'ttft_ms_p99', 'step_ms_p50',
                                           'step_ms_p99')
        for part in ('start', 'end', 'drift_pct')] + [r['soak'][k] for k in (
            'host_load_start', 'host_load_end', 'rss_mib_start', 'rss_mib_end', 'rss_bound_mib',
            'threads_start', 'threads_end')],
}


def stored_records(stored):
    """Return the file a "stored in" cell names and the records it names there (all, for a log)."""
    path, *names = re.findall(r'`([^`]*)`', stored)
    text = (ROOT / 'benchmarks' / 'results' / path).read_text()
    if not path.endswith('.json'):
        return path, text
    figures = json.loads(text)['figures']
    records = {}
    for name in names:
        found = {k: v for k, v in figures.items()
                 if k == name or name.endswith('...') and k.startswith(name[:-3])}
        assert found, f'{path} has no record {name!r}'
        records.update(found)
    return path, records


def strings(value):
    """Yield every string inside a record."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def test_every_reliability_figure_has_its_file_and_a_check():
    table = reliability_table()
    assert set(RELIABILITY_FIGURES) <= set(table), set(RELIABILITY_FIGURES) - set(table)
    for label, (figure, stored) in table.items():
        if figure:
            assert label in RELIABILITY_FIGURES, f'{label}: a figure this test does not check'
            assert stored.startswith('`'), f'{label}: no results file named beside its figure'


@pytest.mark.parametrize('label', RELIABILITY_FIGURES)
def test_reliability_table_figures_are_their_files(label):
    figure, stored = reliability_table()[label]
    path, records = stored_records(stored)
    expected = RELIABILITY_FIGURES[label](records)
    shown = FIGURE.findall(TEXT.sub(' ', figure))
    assert len(shown) == len(expected), f'{label}: published {shown}, {path} has {expected}'
    for text, value in zip(shown, expected):
        assert_rounds_to(text, value, f'{label} ({path})')
    texts = list(strings(records)) if isinstance(records, dict) else [records]
    for quoted in re.findall(r'"([^"]*)"', figure):
        for part in filter(None, (p.strip() for p in quoted.split('...'))):
            assert any(part in text for text in texts), f'{label}: "{part}" is not in {path}'


@pytest.mark.parametrize('label, backend', [
    ('`sdpa` (torch', 'sdpa'), ('`sdpa-cudnn`', 'sdpa-cudnn'), ('`physinf`', 'physinf'),
    ('`sdpa-flash`', 'sdpa-flash'), ('`eager`', 'eager'), ('`flex_attention`', 'flex_attention'),
    ('`sdpa-efficient`', 'sdpa-efficient'), ('`sdpa-math`', 'sdpa-math')])
def test_stacks_attention_table_is_attention_json(label, backend):
    cells = load(H200 / 'attention.json')['cells']
    for text, ctx in zip(row(STACKS, label, after='Attention per layer, in us'),
                         (2048, 16384)):
        found = [c for c in cells if (c['backend'], c['ctx']) == (backend, ctx)]
        assert len(found) == 1, (backend, ctx)
        assert_rounds_to(numbers(text)[0], found[0]['us_per_layer_p50'], f'{backend} at {ctx}')


@pytest.mark.parametrize('label, files', [
    ('bf16', ('protocol_llama-3.1-8b.json', 'hf', 'hf-graphed', 'graphed')),
    ('bitsandbytes NF4', ('stacks_bnb-nf4.json', 'hf:bnb-nf4', 'hf-graphed:bnb-nf4', None)),
    ('torchao int4', ('stacks_torchao-int4.json', 'hf:torchao-int4',
                      'hf-graphed:torchao-int4', None)),
    ('torchao int8', ('stacks_torchao-int8.json', 'hf:torchao-int8', 'not measured', None))])
def test_stacks_table_is_its_files(label, files):
    file, *modes = files
    for text, mode in zip(row(STACKS, label, after='Whole steps by stack'), modes):
        if mode is None:
            assert text == '-'
            continue
        if mode == 'not measured':
            assert text.startswith(mode)
            assert not [c for c in load(H200 / file)['cells'] if c['mode'].startswith('hf-g')]
            continue
        assert_rounds_to(numbers(text)[0], protocol_cell(file, mode, 2048)['step_ms_p50'],
                         f'{mode} in {file}')
    gptq = row(STACKS, 'GPTQ 4-bit', after='Whole steps by stack')[2]
    assert_rounds_to(numbers(gptq)[0], protocol_cell(GPTQ_GRAPHED, 'graphed', 2048)[
        'step_ms_p50'], 'GPTQ graphed')
    assert_rounds_to(numbers(gptq)[-1], protocol_cell('stacks_gptq.json', 'exllamav2', 2048)[
        'step_ms_p50'], 'GPTQ exllamav2')


@pytest.mark.parametrize('label, stack', [
    ('`sdpa`', ''), ('`sdpa-cudnn`', ':sdpa-cudnn'), ('`sdpa-math`', ':sdpa-math'),
    ('`sdpa-flash`', ':sdpa-flash'), ('`sdpa-efficient`', ':sdpa-efficient'),
    ('`eager`', ':eager'), ('`flex_attention`', ':flex_attention')])
def test_stacks_attention_stack_table_is_stacks_attention_json(label, stack):
    results = load(H200 / 'stacks_attention.json')
    unavailable = {u['mode'] for u in results['unavailable']}
    cells = row(STACKS, label, after='Whole steps by attention stack')
    for text, backend in zip(cells, ('hf', 'hf-graphed')):
        mode = backend + stack
        if mode in unavailable:   # a reason, not a figure
            assert text.startswith(('no kernel', 'not captured')), (mode, text)
            continue
        assert_rounds_to(numbers(text)[0], protocol_cell('stacks_attention.json', mode, 2048)[
            'step_ms_p50'], mode)


@pytest.mark.parametrize('setting', ['ngram:1', 'ngram:2', 'ngram:4', 'ngram:8'])
def test_speculation_table_equals_its_acceptance_file(setting):
    overall = load(ROOT / 'benchmarks/results/dev/speculation_acceptance.json')['overall']
    cells = row('docs/SPECULATION.md', f'`{setting}`')
    tokens_per_step, kept = numbers(cells[0])[0], numbers(cells[1])[0]
    assert_rounds_to(tokens_per_step, overall[setting]['tokens_per_step'], setting)
    assert_rounds_to(kept, 100 * overall[setting]['acceptance'], setting)
    assert overall[setting]['identical']


CONSTRAINED = ROOT / 'benchmarks' / 'results'
# docs/PERF.md's constrained tables: (table heading, shape cell, machine) -> results file
CONSTRAINED_ROWS = {
    ('**4ffbab9', 'Llama-3.1-8B, 128k (trained locally)', None):
        'h200/constrained/4ffbab9/constrained_llama-3.1-8b.json',
    ('**4ffbab9', 'SmolLM2-135M shape, 49k (the embedded tokenizer)', None):
        'h200/constrained/4ffbab9/constrained_smollm2-135m.json',
    ('**69c375b', 'Llama-3.1-8B, 128k (trained locally)', 'H200'):
        'h200/constrained/77ddc85/constrained_llama-3.1-8b.json',
    ('**69c375b', 'SmolLM2-135M shape, 49k (the embedded tokenizer)', 'H200'):
        'h200/constrained/77ddc85/constrained_smollm2-135m.json',
    ('**69c375b', 'Llama-3.1-8B, 128k', 'H100'):
        'h100/constrained/constrained_llama-3.1-8b.json',
    ('**69c375b', 'SmolLM2-135M shape, 49k', 'H100'):
        'h100/constrained/constrained_smollm2-135m.json',
}


@pytest.mark.parametrize('heading, shape, machine', sorted(CONSTRAINED_ROWS, key=str))
def test_constrained_tables_are_their_files(heading, shape, machine):
    text = (ROOT / 'docs/PERF.md').read_text()
    table = text[text.index(heading):].split('\n\n')[1]   # the heading's paragraph, then its table
    rows = [[c.strip() for c in line.strip('|').split('|')] for line in table.splitlines()]
    found = [cells[1:] for cells in rows if cells[0] == shape
             and (machine is None or cells[1] == machine)]
    assert len(found) == 1, (heading, shape, machine)
    cells = found[0][1:] if machine else found[0]
    file = CONSTRAINED / CONSTRAINED_ROWS[(heading, shape, machine)]
    cell = load(file)['cells'][0]
    shown = [numbers(cells[0])[0], *numbers(cells[1])[:2], *numbers(cells[2])[:2],
             *numbers(cells[3])[:2]]
    keys = ['step_ms_p50', 'constrained_step_ms_p50', 'constrained_ratio_p50',
            'constrained_step_ms_p99', 'constrained_ratio_p99', 'mask_us_p50', 'mask_us_p99']
    for value, key in zip(shown, keys):
        assert_rounds_to(value, cell[key], f'{file.name} {key}')
    assert ('H100' if machine == 'H100' else 'H200') in cell['device']


FAMILY_ROWS = [('Llama-3.2-1B', 'llama-3.2-1b'), ('Llama-3.2-3B', 'llama-3.2-3b'),
               ('Llama-3.1-8B', 'llama-3.1-8b'), ('Qwen3-0.6B', 'qwen3-0.6b'),
               ('Qwen3-1.7B', 'qwen3-1.7b'), ('Qwen3-4B', 'qwen3-4b'), ('Qwen3-8B', 'qwen3-8b'),
               ('SmolLM3-3B', 'smollm3-3b'), ('Phi-4-mini', 'phi-4-mini'),
               ('Gemma-3-270M', 'gemma-3-270m'), ('Gemma-3-1B', 'gemma-3-1b'),
               ('Gemma-3-4B', 'gemma-3-4b')]


# The README's Llama rows are the main table's files; the 4-bit 8B's step is the plain step of
# the verify run at d065eae; Gemma 3's bf16 rows are 905281d's A/B (its new arm); another
# family's bf16 row is its file of the swept launch shapes (3553f77) where 72cf15a tuned it,
# else d065eae's, and every family's 4-bit row d065eae's.
GEMMA_BF16 = 'families/905281d/family_{}_bf16_new.json'
FAMILY_FILES = {'llama-3.2-1b': {'bf16': 'robots_llama-3.2-1b.json'},
                'llama-3.2-3b': {'bf16': 'robots_llama-3.2-3b.json'},
                'llama-3.1-8b': {'bf16': 'graphed_llama-3.1-8b.json',
                                 'gptq': 'speculation/d065eae/verify_llama-3.1-8b-gptq.json'},
                **{shape: {'bf16': GEMMA_BF16.format(shape),
                           'gptq': f'families/d065eae/family_{shape}_gptq.json'}
                   for shape in ('gemma-3-270m', 'gemma-3-1b', 'gemma-3-4b')}}
FAMILIES_SWEPT = {'qwen3-0.6b', 'qwen3-1.7b', 'qwen3-4b', 'qwen3-8b', 'smollm3-3b', 'gemma-3-1b',
                  'gemma-3-4b'}


@pytest.mark.parametrize('label, shape', FAMILY_ROWS)
def test_readme_family_rows_are_their_files(label, shape):
    bf16 = '3553f77' if shape in FAMILIES_SWEPT else 'd065eae'
    files = FAMILY_FILES.get(shape, {'bf16': f'families/{bf16}/family_{shape}_bf16.json',
                                     'gptq': f'families/d065eae/family_{shape}_gptq.json'})
    cells = row(README, label, after='| shape | bf16 step (R_floor) |')
    assert len(cells) == 2, cells
    for cell, quant in zip(cells, ('bf16', 'gptq')):
        if quant not in files:
            assert cell == '-', f'{shape} {quant}: published {cell}, no file'
            continue
        found = [c for c in load(H200 / files[quant])['cells']
                 if (c['mode'], c['ctx']) == ('graphed', 2048)]
        assert len(found) == 1 and 'H200' in found[0]['device'], files[quant]
        assert_step_cell(cell, found[0], f'{shape} {quant}')


TTFT_ROWS = [('Llama-3.2-1B bf16, d065eae', 'llama-3.2-1b'),
             ('Llama-3.1-8B bf16, d065eae', 'llama-3.1-8b'),
             ('Llama-3.1-8B GPTQ 4-bit, d065eae', 'llama-3.1-8b-gptq')]


@pytest.mark.parametrize('label, tag', TTFT_ROWS)
def test_perf_ttft_rows_at_d065eae_are_their_files(label, tag):
    results = load(H200 / 'ttft' / 'd065eae' / f'ttft_{tag}.json')
    assert 'H200' in results['machine']['gpu']
    rows = {r['history']: r for r in results['rows']}
    cells = row('docs/PERF.md', label,
                after='**Measured at d065eae, one H200** (`run_device.sh ttft`')
    expected = [[rows[0]['cold_ms']], [rows[512]['reused_ms']], [rows[2048]['reused_ms']],
                [rows[16384]['reused_ms']],
                [rows[2048]['cold_ms'], rows[2048]['cold_fraction_of_peak']],
                [rows[16384]['cold_ms'], rows[16384]['cold_fraction_of_peak']]]
    assert len(cells) == len(expected), cells
    for cell, values in zip(cells, expected):
        shown = numbers(cell)
        assert len(shown) >= len(values), f'{tag}: {cell!r} shows fewer figures than its file'
        for figure, value in zip(shown, values):
            assert_rounds_to(figure, value, f'{tag} {cell}')


SWEPT_ROWS = [(label, shape) for label, shape in FAMILY_ROWS if shape in FAMILIES_SWEPT]


@pytest.mark.parametrize('label, shape', SWEPT_ROWS)
def test_perf_family_sweep_rows_are_their_files(label, shape):
    cells = row('docs/PERF.md', label,
                after="**The families' launch shapes swept (72cf15a; timed at 3553f77")
    for cell, commit in ((cells[1], 'd065eae'), (cells[2], '3553f77')):
        found = load(H200 / 'families' / commit / f'family_{shape}_bf16.json')['cells'][0]
        assert 'H200' in found['device'], (shape, commit)
        assert_step_cell(cell, found, f'{shape} {commit}')


VERIFY_ROWS = [('Llama-3.1-8B bf16', 'llama-3.1-8b'),
               ('Llama-3.1-8B GPTQ 4-bit', 'llama-3.1-8b-gptq'), ('Llama-3.2-1B', 'llama-3.2-1b')]


@pytest.mark.parametrize('label, tag', VERIFY_ROWS)
def test_perf_verify_rows_at_3553f77_are_their_files(label, tag):
    found = load(H200 / 'speculation' / '3553f77' / f'verify_{tag}.json')['cells'][0]
    assert 'H200' in found['device']
    cells = row('docs/PERF.md', label, after='**v5 (72cf15a; timed at 3553f77, one H200)')
    assert_rounds_to(numbers(cells[0])[0], found['step_ms_p50'], f'{tag} step')
    for cell, k in zip(cells[1:5], (1, 2, 4, 8)):
        assert_rounds_to(numbers(cell)[0], found[f'verify_ratio_k{k}'], f'{tag} t({k})')


def v6_verify_rows():
    """Return (cells, file) of each row of PERF.md's verify v6 protocol table (H100)."""
    text = (ROOT / 'docs/PERF.md').read_text()
    start = text.index('| shape (H100) | step | t(1) / step', text.index('**v6 measured'))
    rows = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith('|'):
            break
        cells = table_cells(line)
        rows.append((cells, re.findall(r'`([^`]+\.json)`', cells[-1])[0]))
    return rows


def test_perf_verify_rows_at_v6_are_their_h100_files():
    rows = v6_verify_rows()
    assert len(rows) == 6
    for cells, file in rows:
        found = load(ROOT / 'benchmarks/results/h100/speculation' / file)['cells'][0]
        assert 'H100' in found['device'], file
        assert_rounds_to(numbers(cells[1])[0], found['step_ms_p50'], f'{file} step')
        for cell, k in zip(cells[2:6], (1, 2, 4, 8)):
            assert_rounds_to(numbers(cell)[0], found[f'verify_ratio_k{k}'], f'{file} t({k})')


GEMMA_ROWS = [('Gemma-3-270M', 'gemma-3-270m'), ('Gemma-3-1B', 'gemma-3-1b'),
              ('Gemma-3-4B', 'gemma-3-4b')]


@pytest.mark.parametrize('label, shape', GEMMA_ROWS)
def test_perf_gemma_attention_ab_rows_are_their_files(label, shape):
    # PERF.md's H100 A/B of Gemma 3's attention shape (a2a23ea): before and after, R_floor too.
    cells = row('docs/PERF.md', label, after='**Measured (a2a23ea, one H100')
    folder = H100_FAMILIES / 'a2a23ea'
    for cell, arm in zip(cells[:2], ('before', 'after')):
        found = load(folder / f'family_{shape}_bf16_{arm}.json')['cells'][0]
        assert 'H100' in found['device'], (shape, arm)
        assert_step_cell(cell, found, f'{shape} {arm}')


@pytest.mark.parametrize('label, shape', GEMMA_ROWS)
def test_perf_gemma_post_norm_ab_rows_are_their_files(label, shape):
    # PERF.md's H200 table at 905281d: the files before the attention rows, then both arms.
    cells = row('docs/PERF.md', label, after='**Measured (905281d, one H200)')
    before = 'd065eae' if shape == 'gemma-3-270m' else '3553f77'
    files = (f'families/{before}/family_{shape}_bf16.json',
             f'families/905281d/family_{shape}_bf16_base.json',
             f'families/905281d/family_{shape}_bf16_new.json')
    for cell, file in zip(cells[:3], files):
        found = load(H200 / file)['cells'][0]
        assert 'H200' in found['device'], file
        assert_step_cell(cell, found, file)


@pytest.mark.parametrize('label, shape', GEMMA_ROWS)
def test_perf_gemma_post_norm_fold_rows_are_their_files(label, shape):
    # PERF.md's H100 A/B of the dropped post-norm fold (055d0c4): each arm's runs, step and
    # R_floor, and the change between the arms' mean steps.
    cells = row('docs/PERF.md', label, after='**Measured (055d0c4, one H100; dropped)')
    folder = H100_FAMILIES / '055d0c4'
    runs = (1,) if shape == 'gemma-3-270m' else (1, 2)
    steps = {}
    for cell, arm in zip(cells[:2], ('base', 'new')):
        found = [load(folder / f'family_{shape}_bf16_{arm}{run}.json')['cells'][0]
                 for run in runs]
        shown = numbers(cell)
        assert len(shown) == 2 * len(runs), cell
        for i, cell_found in enumerate(found):
            assert 'H100' in cell_found['device'], (shape, arm)
            assert_rounds_to(shown[i], cell_found['step_ms_p50'], f'{shape} {arm} step')
            assert_rounds_to(shown[len(runs) + i], cell_found['R_floor'], f'{shape} {arm} R')
        steps[arm] = sum(c['step_ms_p50'] for c in found) / len(found)
    assert_rounds_to(numbers(cells[2])[0], (steps['new'] - steps['base']) * 1000,
                     f'{shape} change')


def test_perf_gemma_4bit_sweep_rows_are_their_files():
    # PERF.md's H100 table of Gemma-3-1B's 4-bit step before and after its GEMVs were swept.
    folder = H100_FAMILIES / '2ccb505'
    after = "**Gemma-3-1B's 4-bit GEMVs swept (H100, at 2ccb505)"
    means = {}
    for label, arm in (('before', 'base'), ('swept rows', 'new')):
        cells = row('docs/PERF.md', label, after=after)
        steps = []
        for run, cell in zip((1, 2, 3), cells):
            found = load(folder / f'family_gemma-3-1b_gptq_{arm}{run}.json')['cells'][0]
            assert 'H100' in found['device'], (arm, run)
            assert_step_cell(cell, found, f'{arm}{run}')
            steps.append(found['step_ms_p50'])
        means[arm] = sum(steps) / len(steps)
    text = flat_text('docs/PERF.md')
    change = text[text.index(after):].split('- ', 1)[1].split(' us')[0]
    assert_rounds_to(change, (means['new'] - means['base']) * 1000, 'the change')


FAMILY_4BIT_FOLDER = H100_FAMILIES / '5c44273'


def assert_ab_row(label, shape, after, run='', folder=FAMILY_4BIT_FOLDER, quant='gptq'):
    """
    Check a 'floor | before | after | change' row of an H100 A/B table; return the change %.

    Cells after those four (a prediction) are not figures of the files.
    """
    floor, base_cell, new_cell, change = row('docs/PERF.md', label, after=after)[:4]
    found = {arm: load(folder / f'family_{shape}_{quant}_{arm}{run}.json')['cells'][0]
             for arm in ('base', 'new')}
    assert all('H100' in cell['device'] for cell in found.values()), shape
    assert_rounds_to(numbers(floor)[0], found['base']['t_floor_ms'], f'{shape} floor')
    assert_step_cell(base_cell, found['base'], f'{shape} base')
    assert_step_cell(new_cell, found['new'], f'{shape} new')
    change_us, change_percent = numbers(change)
    delta = found['new']['step_ms_p50'] - found['base']['step_ms_p50']
    assert_rounds_to(change_us, delta * 1000, f'{shape} change')
    percent = 100 * delta / found['base']['step_ms_p50']
    assert_rounds_to(change_percent, percent, f'{shape} change %')
    return percent


def gain_range(percents):
    """Return the range of gains of changes in percent (all negative) as the text writes it."""
    return f'{-max(percents):.1f}-{-min(percents):.1f}%'


def assert_ab_runs(after, folder, shapes, runs=2):
    """
    Check the bf16 rows 'LABEL', 'LABEL, run 2', ... of an H100 A/B table, runs a shape.

    shapes is (label, shape) pairs; returns each shape's changes in percent, run by run.
    """
    tags = [('', '')] + [(f', run {n}', f'_r{n}') for n in range(2, runs + 1)]
    return {shape: [assert_ab_row(label + suffix, shape, after, run=run, folder=folder,
                                  quant='bf16') for suffix, run in tags]
            for label, shape in shapes}


def test_perf_family_4bit_sweep_rows_are_their_files():
    # PERF.md's H100 table of the families' 4-bit steps before and after their GEMVs were swept.
    after = "**The families' 4-bit GEMVs swept (H100, at 5c44273)"
    percents = [assert_ab_row(label, shape, after) for label, shape in (
        ('Qwen3-0.6B', 'qwen3-0.6b'), ('Qwen3-1.7B', 'qwen3-1.7b'), ('Qwen3-4B', 'qwen3-4b'),
        ('Qwen3-8B', 'qwen3-8b'), ('SmolLM3-3B', 'smollm3-3b'), ('Phi-4-mini', 'phi-4-mini'),
        ('Gemma-3-270M', 'gemma-3-270m'), ('Gemma-3-4B', 'gemma-3-4b'))]
    # README and PERF.md give the range of the gains.
    gains = gain_range(percents)
    assert f'took {gains} off every' in flat_text(README), gains
    assert f'Every shape gained, {gains}' in flat_text('docs/PERF.md'), gains


def test_perf_family_4bit_second_run_rows_are_their_files():
    # PERF.md's second H100 run of the 4-bit rows: Llama shapes that share them, two families.
    for label, shape in (('Llama-3.2-1B', 'llama-3.2-1b'), ('Llama-3.2-3B', 'llama-3.2-3b'),
                         ('Llama-3.1-8B', 'llama-3.1-8b'), ('Phi-4-mini', 'phi-4-mini'),
                         ('Qwen3-0.6B', 'qwen3-0.6b')):
        assert_ab_row(label, shape, '| GPTQ 4-bit (H100, run 2)', run='2')


def test_perf_gemma_4bit_qkv_on_cuda_rows_are_their_files():
    # PERF.md's H100 A/B of Gemma 3's 4-bit QKV on q4_gemv.cu (a31e510) against Triton.
    after = '**Measured (a31e510, one H100).**'
    percents = [assert_ab_row(label, shape, after, folder=H100_FAMILIES / 'a31e510')
                for label, shape in (('Gemma-3-270M', 'gemma-3-270m'),
                                     ('Gemma-3-1B', 'gemma-3-1b'), ('Gemma-3-4B', 'gemma-3-4b'))]
    gains = gain_range(percents)
    assert f'{gains} more' in flat_text(README), gains


def test_perf_h100_bf16_sweep_rows_are_their_files():
    # PERF.md's H100 table of bf16 steps before and after the bf16 GEMVs were swept there.
    after = '**Measured (f5d8848, one H100).**'
    folder = H100_FAMILIES / 'f5d8848'
    shapes = (('Qwen3-0.6B', 'qwen3-0.6b'), ('Llama-3.2-1B', 'llama-3.2-1b'),
              ('Qwen3-4B', 'qwen3-4b'), ('Llama-3.2-3B', 'llama-3.2-3b'),
              ('Gemma-3-1B', 'gemma-3-1b'), ('SmolLM3-3B', 'smollm3-3b'))
    percents = [assert_ab_row(label, shape, after, folder=folder, quant='bf16')
                for label, shape in shapes]
    gains = gain_range(percents)
    assert f'took {gains} off the steps of six' in flat_text(README), gains


def test_perf_h100_bf16_sweep_of_three_more_shapes_is_its_files():
    # PERF.md's H100 table at 12df48d (two runs an arm) and its gate/up one-tile arm of Qwen3-8B.
    after = '**Measured (12df48d, one H100; no H200 was lent).**'
    folder = H100_FAMILIES / '12df48d'
    percents = assert_ab_runs(after, folder, (('Qwen3-1.7B', 'qwen3-1.7b'),
                                              ('Gemma-3-4B', 'gemma-3-4b'),
                                              ('Qwen3-8B', 'qwen3-8b')))
    text = flat_text('docs/PERF.md')
    paragraph = text[text.index(after):]
    gains = gain_range([p for runs in percents.values() for p in runs])
    assert f'the sweep took {gains} off these steps' in paragraph, gains
    assert f'{gains} off three more' in flat_text(README), gains
    steps = {arm: [load(folder / f'family_qwen3-8b_bf16_{arm}{run}.json')['cells'][0]
                   ['step_ms_p50'] for run in ('', '_r2')] for arm in ('ahead1', 'new')}
    shown = (f"{steps['ahead1'][0]:.3f} and {steps['ahead1'][1]:.3f} ms against the swept "
             f"{steps['new'][0]:.3f} and {steps['new'][1]:.3f}")
    assert shown in paragraph, shown


def test_perf_h100_bf16_sweep_of_the_last_shapes_is_its_files():
    # PERF.md's H100 table at 5c3dc75 (two runs an arm): Gemma-3-270M kept, the other two not.
    after = '**Measured (5c3dc75, the last shapes swept on an H100).**'
    folder = H100_FAMILIES / '5c3dc75'
    percents = assert_ab_runs(after, folder, (('Gemma-3-270M', 'gemma-3-270m'),
                                              ('Llama-3.1-8B', 'llama-3.1-8b'),
                                              ('Phi-4-mini', 'phi-4-mini')))
    gains = gain_range(percents['gemma-3-270m'])
    assert f'{gains} off Gemma-3-270M' in flat_text(README), gains
    losses = sorted(percents['phi-4-mini'])
    shown = f'Phi-4-mini lost {losses[0]:.1f}-{losses[1]:.1f}%'
    assert shown in flat_text('docs/PERF.md'), shown


def test_perf_shared_o_proj_rows_are_their_files():
    # PERF.md's H100 A/B of the o_proj row SmolLM3-3B and Llama-3.2-1B share (three runs an arm).
    after = '**The o_proj row SmolLM3-3B and Llama-3.2-1B share with Qwen3-1.7B'
    folder = H100_FAMILIES / '5c3dc75' / 'shared_o_proj'
    assert_ab_runs(after, folder, (('SmolLM3-3B', 'smollm3-3b'), ('Llama-3.2-1B', 'llama-3.2-1b')),
                   runs=3)


def test_perf_lm_head_rows_taken_out_are_their_files():
    # PERF.md's H100 A/B at eb11d9b: three swept lm_head rows against the default shape.
    after = '**Measured (eb11d9b, one H100).**'
    folder = H100_FAMILIES / 'eb11d9b'
    percents = assert_ab_runs(after, folder, (('Qwen3-0.6B', 'qwen3-0.6b'),
                                              ('Llama-3.2-3B', 'llama-3.2-3b'),
                                              ('Gemma-3-4B', 'gemma-3-4b')))
    gains = gain_range([p for runs in percents.values() for p in runs])
    assert f'took {gains} more (Qwen3-0.6B' in flat_text(README), gains
    assert f'the steps ran {gains} shorter without them' in flat_text('config/kernels.yaml'), gains


def test_perf_lm_head_rows_of_8_warps_taken_out_are_their_files():
    # PERF.md's H100 A/B at a89ebe9: the two lm_head rows of 8 warps against the default shape.
    after = '**Measured (a89ebe9, one H100): the two lm_head rows of 8 warps out.**'
    percents = assert_ab_runs(after, H100_FAMILIES / 'a89ebe9' / 'droprows',
                              (('Qwen3-1.7B', 'qwen3-1.7b'), ('Llama-3.2-1B', 'llama-3.2-1b')))
    assert all(p < 0 for runs in percents.values() for p in runs), percents


def test_perf_qwen3_rows_swept_on_an_h100_are_their_files():
    # PERF.md's H100 A/B at a89ebe9: Qwen3-4B's and 8B's rows swept again, against kernels.yaml's.
    after = '**The Qwen3 sweep above, on an H100 (a89ebe9).**'
    assert_ab_runs(after, H100_FAMILIES / 'a89ebe9' / 'qwensweep',
                   (('Qwen3-4B', 'qwen3-4b'), ('Qwen3-8B', 'qwen3-8b')))


def test_perf_head_norm_probe_figures_are_its_file():
    # PERF.md's paragraph on Qwen3's head norms quotes the probe's per-layer times.
    probe = {r['shape']: r for r in load(FAMILY_4BIT_FOLDER / 'headnorm_probe.json')}
    text = flat_text('docs/PERF.md')
    paragraph = text[text.index("**Qwen3's head norms in the split, alone"):]
    for shape in ('qwen3-0.6b', 'qwen3-8b'):
        r = probe[shape]
        shown = f"{r['none_us']:.2f} -> {r['head_norms_us']:.2f} and {r['head_norms2_us']:.2f} us"
        assert shown in paragraph, shown


def test_perf_argmax_probe_table_is_its_file():
    # PERF.md's table of the greedy head's argmax alone (7313861): each lm_head at the launch
    # shape the H100's configuration runs, us a call (the file times two copies).
    probe = load(H100_FAMILIES / '7313861' / 'argmax_probe.json')
    configured = {r['shape']: r for r in probe['rows'] if r['configured']}
    after = '**Measured (7313861, one H100; dropped).**'
    perf = (ROOT / 'docs/PERF.md').read_text()
    for label in ('Llama-3.2-3B', 'Qwen3-0.6B', 'Qwen3-4B', 'Gemma-3-4B', 'Llama-3.1-8B'):
        r = configured[label.lower()]
        assert f"| {label}, {r['n']} x {r['k']} |" in perf, label
        cells = row('docs/PERF.md', label, after)
        assert cells[0] == str(r['programs']), label
        for cell, key in zip(cells[1:4], ('plain_ms', 'greedy_base_ms', 'greedy_new_ms')):
            assert_rounds_to(cell, r[key] * 500, f'{label} {key}')
        ns = (r['greedy_base_ms'] - r['plain_ms']) * 5e5 / r['programs']
        assert_rounds_to(numbers(cells[4])[0], ns, f'{label} ns a program')


def test_perf_lm_head_swept_as_greedy_head_table_is_its_files():
    # PERF.md's table at c27590d: lm_head shapes as rms_matvec (f5d8848's sweep) and as
    # greedy_head (c27590d's), us a call (the files time two copies).
    after = '**Measured (c27590d, one H100): the lm_head swept as `greedy_head`.**'
    text = (ROOT / 'docs/PERF.md').read_text()
    lines = [table_cells(line) for line in text[text.index(after):].split('\n\n')[1].splitlines()
             if line.startswith('|')][2:]
    assert len(lines) == 5
    for cells in lines:
        shape = cells[0].lower()
        shown = tuple(int(v) for v in numbers(cells[1])[-3:])   # (rows, columns, warps)
        for cell, file in ((cells[2], f'f5d8848/sweep_{shape}.json'),
                           (cells[3], f'c27590d/sweepcheck_{shape}.json')):
            if cell == '-':
                continue
            head, = (r for r in load(H100_FAMILIES / file)['gemv'] if r['n'] > 100000)
            ms, = (a['ms'] for a in head['all'] if 'ms' in a and (
                a['config']['block_n'], a['config']['block_k'], a['config']['num_warps']) == shown)
            assert_rounds_to(numbers(cell)[0], ms * 500, f'{cells[0]} {shown} {file}')
