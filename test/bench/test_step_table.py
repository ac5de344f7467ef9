"""benchmarks/step_table.py: the profile stage's files of a step as a row of issue 14's table."""

import json
from pathlib import Path

from benchmark_scripts import benchmark_script, BENCHMARKS
import pytest

step_table = benchmark_script('step_table')
PROFILE_S6 = BENCHMARKS / 'results' / 'h200' / 'profile_s6'


def test_a_committed_step_gives_the_row_docs_perf_printed_for_it():
    # docs/PERF.md, "Issue 14: where the step goes, per kernel", the 1B's "before" row
    step = step_table.read_step(PROFILE_S6 / 'before_kernels_llama-3.2-1b_2048.json')
    assert step['label'] == 'llama-3.2-1b, ctx 2048 (before)'
    assert step_table.time_row(step) == (
        '| llama-3.2-1b, ctx 2048 (before) | 1.006 | 1.148 | 102 | 121 (1.67) | 102 (0.66) | '
        '58 (0.04) | 109 (1.24) | 347 (3.10) | 242 (2.22) | 157 (3.34) | 12 |')


def test_each_op_over_its_bytes_at_the_datasheet_bandwidth():
    # The same step's ops alone over their floor at 4800 GB/s, as docs/PERF.md's per-kernel
    # table gives them (commit 933e379)
    step = step_table.read_step(PROFILE_S6 / 'before_kernels_llama-3.2-1b_2048.json')
    cells = step_table.floor_row(step, 4800).strip('| ').split(' | ')
    assert cells[1:4] == ['1.148', '0.530', '0.618']
    assert cells[4:10] == ['79', '88', '58', '81', '123', '130']
    assert int(cells[10]) + int(cells[11]) == 60   # the head and the rest together


def ops(names, us=1.0):
    return [{'op': op, 'kernel': name, 'us_per_step': us, 'read': 100.0, 'write': 0.0}
            for op, name in names]


def test_the_head_is_the_op_outside_the_layers_that_moves_the_most_bytes():
    layer = ['_matvec_kernel', 'void split_kernel<128, __nv_bfloat16, 3>',
             '_attn_reduce_kernel', '_matvec_kernel', '_gate_up_kernel', '_matvec_kernel']
    rows = ops([(f'layer:{i}', name) for i, name in enumerate(layer)]
               + [('pre:0', '_embed_kernel'), ('post:0', '_matvec_kernel'),
                  ('post:1', '_greedy_finish_kernel')], us=2.0)
    rows[-2]['read'] = 5000.0
    cells = step_table.step_ops(rows)
    assert list(cells) == list(step_table.COLUMNS)
    assert cells['lm_head (+norm, argmax)'] == (2.0, 5000.0)
    assert cells['other'] == (4.0, 200.0)


def test_a_layer_of_another_shape_is_refused_with_the_layer_it_expects():
    five = ['_matvec_kernel', '_attn_split_kernel', '_matvec_kernel', '_gate_up_kernel',
            '_matvec_kernel']
    with pytest.raises(ValueError, match='a layer of 5 kernels .* QKV'):
        step_table.step_ops(ops([(f'layer:{i}', name) for i, name in enumerate(five)]))
    split_first = ['_attn_split_kernel'] + ['_matvec_kernel'] * 5
    with pytest.raises(ValueError, match='a layer of 6 kernels with _matvec_kernel second'):
        step_table.step_ops(ops([(f'layer:{i}', n) for i, n in enumerate(split_first)]))


def test_the_cli_prints_both_tables_and_refuses_a_file_it_cannot_pair(tmp_path, capsys):
    step_table.main([str(PROFILE_S6 / 'before_kernels_llama-3.2-1b_2048.json'),
                     '--target', 'h200'])
    out = capsys.readouterr().out
    assert out.count('| llama-3.2-1b, ctx 2048 (before) |') == 2
    assert 'over its bytes at 4800 GB/s (h200)' in out
    other = tmp_path / 'steps.json'
    other.write_text(json.dumps({}))
    with pytest.raises(SystemExit):
        step_table.main([str(other)])
    assert 'not a kernels_TAG.json' in capsys.readouterr().err
    lone = tmp_path / 'kernels_x.json'   # no profile_x.json beside it
    lone.write_text((PROFILE_S6 / 'before_kernels_llama-3.2-1b_2048.json').read_text())
    with pytest.raises(SystemExit):
        step_table.main([str(lone)])
    assert str(Path(tmp_path / 'profile_x.json')) in capsys.readouterr().err
