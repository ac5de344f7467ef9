"""physinf-report: report.md and PNG plots from results files of several targets."""

import json
import subprocess

from bench_fixture import write_fixture
from installed import installed_command
from physinf_ros.bench import report, results
import pytest

PNG_MAGIC = b'\x89PNG\r\n\x1a\n'


@pytest.fixture(scope='module')
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp('results')
    return [write_fixture(folder, 'h200', {'eager': 14.0, 'graphed': 5.0}, price=3.5),
            write_fixture(folder, 'l4', {'eager': 62.0, 'graphed': 60.0}, price=0.8),
            write_fixture(folder, 'h100-sxm5', {'eager': 14.8, 'graphed': 11.8})]


def test_report_renders_every_plot_and_the_tables(files, tmp_path):
    result = subprocess.run(installed_command('physinf-report')
                            + [str(f) for f in files] + ['--out', str(tmp_path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    for name in report.PLOTS.values():
        png = (tmp_path / name).read_bytes()
        assert png.startswith(PNG_MAGIC) and len(png) > 10_000, name
    text = (tmp_path / 'report.md').read_text()
    for name in report.PLOTS.values():
        assert f']({name})' in text
    for target in ('NVIDIA H200', 'NVIDIA L4', 'NVIDIA H100 SXM5 80GB'):
        assert target in text
    # H200 graphed at 2048: t_floor 3.183 ms, as the design notes work out.
    assert '| 3.183 |' in text
    assert text.count('vs eager') == 6   # graphed vs eager, 2 contexts x 3 targets


def test_the_ladder_climbs_in_bandwidth(files):
    cells = report.rows([results.read(f) for f in files])
    order, names = report._ladder_order(cells)
    assert order == ['NVIDIA L4', 'NVIDIA H100 SXM5 80GB', 'NVIDIA H200']
    assert names[0].endswith('300 GB/s')
    assert report.reference_ctx(cells) == 2048


def test_without_prices_the_cost_plot_is_left_out_with_a_reason(files, tmp_path):
    report.render(files[2:], tmp_path)
    assert not (tmp_path / report.PLOTS['cost']).exists()
    assert (tmp_path / report.PLOTS['r_floor']).exists()
    assert 'no target has an hourly price' in (tmp_path / 'report.md').read_text()


def test_foreign_or_newer_files_are_refused(files, tmp_path):
    other = tmp_path / 'other.json'
    other.write_text(json.dumps({'schema': 'something else'}))
    with pytest.raises(ValueError, match='not a physinf_ros'):
        results.read(other)
    newer = json.loads(files[0].read_text())
    newer['schema_version'] = results.SCHEMA_VERSION + 1
    other.write_text(json.dumps(newer))
    with pytest.raises(ValueError, match='schema version'):
        results.read(other)


def test_csv_sits_beside_the_json_with_one_row_per_cell(files):
    import csv
    with open(files[0].with_suffix('.csv')) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4 and set(rows[0]) == set(results.CSV_FIELDS)
    graphed = [r for r in rows if r['mode'] == 'graphed']
    assert all(float(r['ci95_lo']) <= float(r['speedup']) <= float(r['ci95_hi'])
               for r in graphed)
    assert all(r['cost_per_mtok'] and r['price_per_hour'] == '3.5' for r in rows)


def test_stack_tables_put_the_papers_figures_beside_ours(tmp_path):
    # A stack-matrix file (an NF4 mode and one recorded unavailable) and an attention file.
    path = write_fixture(tmp_path, 'h200', {'eager': 14.0, 'hf-graphed:bnb-nf4': 9.0})
    doc = json.loads(path.read_text())
    doc['unavailable'] = [{'mode': 'hf:awq-marlin', 'reason': 'does not install here'}]
    path.write_text(json.dumps(doc))
    attention = tmp_path / 'attention.json'
    attention.write_text(json.dumps({
        'schema': 'physinf_ros.attention', 'schema_version': 1,
        'cells': [{'backend': 'sdpa', 'ctx': 2048, 'us_per_layer_p50': 12.5,
                   'us_per_layer_p10': 12.0, 'us_per_layer_p90': 13.0}],
        'unavailable': [{'backend': 'flashinfer', 'reason': 'flashinfer is not installed'}]}))
    text = report.render([path, attention], tmp_path / 'out').read_text()
    stacks = text[text.index('## Software stacks: whole'):text.index('## Software stacks: att')]
    assert '| hf-graphed:bnb-nf4 | bnb-nf4 | sdpa |' in stacks
    assert '| 59.36 |' in stacks and '| 45.24 |' in stacks   # the paper's L4 NF4 and AWQ rows
    assert 'not measured: does not install here' in stacks
    table = text[text.index('## Software stacks: att'):]
    assert '| sdpa | 12.50 [12.00, 13.00] | 36.05 |' in table   # ours, then the paper's H100
    assert '| flashinfer | not measured: flashinfer is not installed | 48.2 |' in table
    assert (tmp_path / 'out' / 'stacks_ms_per_step.png').read_bytes().startswith(PNG_MAGIC)
