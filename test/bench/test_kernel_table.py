"""benchmarks/kernel_table.py: ncu's raw CSV of one step placed by layer op."""

import gzip

from benchmark_scripts import benchmark_script
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


def test_a_step_without_one_attention_per_layer_is_refused():
    with pytest.raises(ValueError, match='2 _attn_split_kernel launches for 3 layers'):
        kernel_table.roles(LAYER * 2, layers=3)
