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
    result = subprocess.run(installed_command('physinf-report', 'physinf_ros.bench.report')
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
