"""physinf-bench on the embedded model on the CPU, tiny settings, then physinf-report on it."""

import csv
import json
import subprocess

from installed import installed_command
from physinf_ros.bench import report, results
from physinf_ros.bench.cli import bench_main
import pytest

BENCH = installed_command('physinf-bench')
# SmolLM2-135M, float32, tied embeddings (worked out in test_roofline.py).
EMBEDDED_W_BYTES = 134_515_008 * 4
EMBEDDED_KV_BYTES_PER_TOKEN = 46_080


def run(*args, timeout=600):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope='module')
def bench(tmp_path_factory):
    out = tmp_path_factory.mktemp('bench') / 'cpu' / 'embedded.json'
    # One load: eager and graphed share weights (graphed runs as eager on a CPU). The node's
    # test covers a run across two backend families (hf, eager).
    result = run(*BENCH, '--model', 'embedded', '--device', 'cpu', '--modes', 'eager,graphed',
                 '--contexts', '16,32', '--steps', '3', '--warmup', '1', '--sessions', '2',
                 '--out', str(out))
    assert result.returncode == 0, result.stderr
    return out, result


def test_results_json_has_every_cell_with_its_samples(bench):
    out, _ = bench
    doc = results.read(out)
    assert doc['status'] == 'complete' and doc['schema_version'] == results.SCHEMA_VERSION
    assert doc['protocol']['modes'] == ['eager', 'graphed']
    assert doc['protocol']['warmup_steps'] == 1 and doc['protocol']['measured_steps'] == 3
    cells = {(c['mode'], c['ctx']): c for c in doc['cells']}
    assert set(cells) == {(m, c) for m in ('eager', 'graphed') for c in (16, 32)}
    for cell in cells.values():
        assert cell['sessions'] == 2 and len(cell['step_ms']) == 2
        assert all(len(s) == 3 and min(s) > 0 for s in cell['step_ms'])
        samples = sorted(ms for s in cell['step_ms'] for ms in s)
        assert cell['step_ms_p50'] == pytest.approx((samples[2] + samples[3]) / 2)
        assert cell['W_bytes'] == EMBEDDED_W_BYTES
        assert cell['K_bytes'] == EMBEDDED_KV_BYTES_PER_TOKEN * cell['ctx']
        t_floor = (cell['W_bytes'] + cell['K_bytes']) / (cell['B_peak_gbs'] * 1e9) * 1e3
        assert cell['t_floor_ms'] == pytest.approx(t_floor)
        assert cell['R_floor'] == pytest.approx(t_floor / cell['step_ms_p50'])
        assert cell['cost_per_mtok'] is None   # no price for a CPU
    for ctx in (16, 32):
        cell = cells['graphed', ctx]
        assert cell['backend'] == 'eager'   # the CPU fallback is recorded
        assert cell['baseline'] == 'eager'
        assert cell['ci95_lo'] <= cell['speedup'] <= cell['ci95_hi']
        assert cell['launch_fraction'] is None   # no CUDA graph ran
        assert cells['eager', ctx]['speedup'] is None   # the baseline


def test_machine_and_target_facts(bench):
    doc = results.read(bench[0])
    assert doc['target']['measured'] and doc['target']['B_peak_gbs'] > 0
    assert doc['machine']['packages']['torch'] and doc['machine']['gpu'] is None
    assert doc['model']['W_all_bytes'] == EMBEDDED_W_BYTES
    assert doc['model']['config']['num_layers'] == 30


def test_csv_and_table(bench):
    out, result = bench
    with open(out.with_suffix('.csv')) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4 and set(rows[0]) == set(results.CSV_FIELDS)
    assert json.loads(out.read_text())['cells'][0]['mode'] == rows[0]['mode']
    assert rows[0]['torch'] and rows[0]['cpu'] and rows[0]['gpu'] == ''
    assert rows[0]['schema_version'] == str(results.SCHEMA_VERSION)
    assert 'R_floor' in result.stdout and str(out) in result.stdout
    assert result.stdout.count('[') >= 2   # speedup [CI] of the two graphed cells


def test_report_of_a_real_run(bench, tmp_path):
    assert report.main([str(bench[0]), '--out', str(tmp_path)]) == 0
    assert (tmp_path / 'r_floor_by_context.png').stat().st_size > 10_000
    assert (tmp_path / 'eager_vs_graphed.png').stat().st_size > 10_000
    assert 'graphed (eager)' in (tmp_path / 'report.md').read_text()


@pytest.mark.parametrize('args, message', [
    (['--backend', 'eager', '--modes', 'hf'], 'not both'),
    (['--contexts', '32,abc'], 'integers'),
    (['--modes', 'eager,warp'], "mode 'warp' refused: unknown backend"),
    (['--target', 'nope', '--device', 'cpu'], 'unknown target'),
])
def test_bad_arguments_are_clear_errors(args, message, capsys):
    try:
        code = bench_main(args)
    except SystemExit as error:   # argparse's own errors
        code = error.code
    assert code == 2 and message in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.parametrize('modes', [('eager', 'graphed'), ('hf', 'hf-graphed')])
def test_graph_ab_on_a_gpu(modes, tmp_path):
    from physinf_ros.bench import Benchmark, Plan
    plan = Plan(model='synthetic:llama-3.1-8b', modes=modes, contexts=(512, 1024), steps=10,
                warmup=3, sessions=3, device='cuda')
    doc = Benchmark(plan).run()
    assert doc['status'] == 'complete' and doc['machine']['gpu']
    for cell in doc['cells']:
        assert cell['backend'] == cell['mode']   # no fallback on a GPU
        assert 0 < cell['R_floor'] < 1.0
    for cell in (c for c in doc['cells'] if c['mode'] == modes[1]):
        assert cell['launch_fraction'] == pytest.approx(1 - 1 / cell['speedup'])
        assert cell['ci95_lo'] <= cell['speedup'] <= cell['ci95_hi']
    json_path, _ = results.write(doc, tmp_path / 'gpu.json')
    assert results.read(json_path)['cells'][0]['W_bytes'] == 15_009_857_536


def test_a_constrained_plan_times_its_steps_beside_the_free_ones(tmp_path):
    schema = tmp_path / 'goto.json'
    schema.write_text(json.dumps({
        'type': 'object', 'properties': {'room': {'enum': ['kitchen', 'office']},
                                         'note': {'type': 'string', 'maxLength': 8}},
        'required': ['room', 'note'], 'additionalProperties': False}))
    out = tmp_path / 'constrained.json'
    # 12 steps: more than one reply of this schema, so the next reply's grammar takes over.
    result = run(*BENCH, '--model', 'embedded', '--device', 'cpu', '--modes', 'eager',
                 '--contexts', '16', '--steps', '12', '--warmup', '1', '--sessions', '2',
                 '--json-schema', str(schema), '--out', str(out))
    assert result.returncode == 0, result.stderr
    doc = results.read(out)
    assert json.loads(doc['protocol']['json_schema'])['required'] == ['room', 'note']
    cell = doc['cells'][0]
    assert [len(s) for s in cell['constrained_step_ms']] == [12, 12]
    assert [len(s) for s in cell['mask_us']] == [12, 12]
    assert 0 < cell['mask_us_p50'] <= cell['mask_us_p99']
    assert cell['constrained_ratio_p50'] == pytest.approx(
        cell['constrained_step_ms_p50'] / cell['step_ms_p50'])
    # The grammar's work is inside the constrained step's interval.
    for steps, masks in zip(cell['constrained_step_ms'], cell['mask_us']):
        assert all(ms * 1000 > us for ms, us in zip(steps, masks))


def test_a_schema_that_is_not_json_is_refused_before_loading(tmp_path):
    schema = tmp_path / 'bad.json'
    schema.write_text('{"type": ')
    result = run(*BENCH, '--model', 'embedded', '--json-schema', str(schema))
    assert result.returncode == 2
    assert '--json-schema: response_format is not JSON' in result.stderr
