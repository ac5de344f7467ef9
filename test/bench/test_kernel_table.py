"""benchmarks/kernel_table.py: ncu's raw CSV of one step placed by layer op."""

import gzip
import json

from benchmark_scripts import benchmark_script
from physinf_ros.measurement.targets import load_targets
import pytest

kernel_table = benchmark_script('kernel_table')

LAYER = ['_matvec_kernel', '_attn_split_kernel', '_attn_reduce_kernel', '_matvec_kernel',
         '_gate_up_kernel', '_matvec_kernel']


def write_csv(path, names):
    header = ['ID', 'Kernel Name', 'gpu__time_duration.sum', 'dram__bytes_read.sum',
              'dram__bytes_write.sum', 'launch__grid_size', 'launch__registers_per_thread']
    lines = ['==PROF== Connected to process 1', ','.join(f'"{h}"' for h in header),
             '"","","nsecond","byte","byte","",""']
    for i, name in enumerate(names):
        ns, read = 1000 * (i + 1), 2000 * (i + 1)   # ncu writes thousands with commas
        lines.append(f'"{i}","{name}(int, int)","{ns:,}","{read:,}","0","132","40"')
    path.write_text('\n'.join(lines) + '\n')


@pytest.mark.parametrize('gzipped', [False, True])
def test_layer_ops_are_placed_by_their_position_around_attention(tmp_path, gzipped):
    names = ['_embed'] + LAYER * 3 + ['_matvec_kernel', '_greedy_finish_kernel']
    write_csv(tmp_path / 'step.csv', names)
    path = tmp_path / 'step.csv'
    if gzipped:
        path = tmp_path / 'step.csv.gz'
        path.write_bytes(gzip.compress((tmp_path / 'step.csv').read_bytes()))
    kernels = kernel_table.read_kernels(path)
    assert [k['name'] for k in kernels] == names
    rows = {r['op']: r for r in kernel_table.table(kernels, layers=3)}
    assert sorted(rows) == ['layer:0', 'layer:1', 'layer:2', 'layer:3', 'layer:4', 'layer:5',
                            'post:0', 'post:1', 'pre:0']
    assert rows['layer:1']['kernel'] == '_attn_split_kernel'
    assert rows['layer:1']['calls'] == 3
    # kernel i took i+1 us and moved 2 kB per us: layer:1 is kernels 2, 8, 14
    assert rows['layer:1']['us_per_step'] == pytest.approx(3 + 9 + 15)
    assert rows['layer:1']['gbps'] == pytest.approx(2.0)
    assert rows['post:0']['kernel'] == '_matvec_kernel' and rows['post:0']['calls'] == 1


def test_each_op_stands_beside_its_bytes_at_a_datasheet_bandwidth(tmp_path):
    names = ['_embed_kernel'] + LAYER * 2 + ['_greedy_finish_kernel']
    write_csv(tmp_path / 'step.csv', names)
    kernels = kernel_table.read_kernels(tmp_path / 'step.csv')
    rows = {r['op']: r for r in kernel_table.table(kernels, layers=2, peak_gbs=4000)}
    # layer:4 is kernels 5 and 11: 6 + 12 us, 12 + 24 kB; 36 kB at 4000 GB/s is 0.009 us
    assert rows['layer:4']['floor_us'] == pytest.approx(36000 / 4000 / 1e3)
    assert rows['layer:4']['over_floor_us'] == pytest.approx(18 - 0.009)
    assert 'floor_us' not in kernel_table.table(kernels, layers=2)[0]


def test_the_cli_takes_the_bandwidth_of_a_target_from_targets_yaml(tmp_path, capsys):
    write_csv(tmp_path / 'step.csv', ['_embed_kernel'] + LAYER * 16 + ['_greedy_finish_kernel'])
    kernel_table.main([str(tmp_path / 'step.csv'), '--model', 'synthetic:llama-3.2-1b',
                       '--target', 'h200', '--out', str(tmp_path / 't.json')])
    out = json.loads((tmp_path / 't.json').read_text())
    assert out['peak_gbs'] == load_targets()['h200'].bandwidth_gbs
    assert sum(op['floor_us'] for op in out['ops']) == pytest.approx(
        out['bytes'] / out['peak_gbs'] / 1e3)
    assert '| floor us | over |' in capsys.readouterr().out
    with pytest.raises(SystemExit):
        kernel_table.main([str(tmp_path / 'step.csv'), '--model', 'synthetic:llama-3.2-1b',
                           '--target', 'no-such-gpu'])
    assert "unknown target 'no-such-gpu'" in capsys.readouterr().err


def test_the_cuda_split_kernel_marks_the_layers_as_the_triton_one_does():
    # ncu's demangled names of attention_split.cu's and q4_gemv.cu's kernels, cut at '('
    cuda_layer = [name.replace('_attn_split_kernel', 'void split_kernel<128, __nv_bfloat16, 3>')
                  .replace('_matvec_kernel', 'void <unnamed>::q4_gemv_kernel<128, 4, 0>')
                  for name in LAYER]
    names = ['_embed_kernel'] + cuda_layer * 2 + ['_greedy_finish_kernel']
    assert kernel_table.roles(names, layers=2) == kernel_table.roles(
        ['_embed_kernel'] + LAYER * 2 + ['_greedy_finish_kernel'], layers=2)
    assert kernel_table.base_name(cuda_layer[0]) == 'q4_gemv_kernel'


def test_a_step_without_one_attention_per_layer_is_refused():
    with pytest.raises(ValueError, match='2 attention split launches .* for 3 layers'):
        kernel_table.roles(LAYER * 2, layers=3)
    # a kernel whose name only contains the anchor's is not an attention split
    with pytest.raises(ValueError, match='0 attention split launches'):
        kernel_table.roles(['_matvec_kernel', 'void other_split_kernel<4>'] * 3, layers=3)
