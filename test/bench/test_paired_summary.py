"""benchmarks/paired_summary.py: a paired run's files summarised per model and context."""

import json

from benchmark_scripts import benchmark_script
import pytest

paired_summary = benchmark_script('paired_summary')


def write(folder, name, medians_by_ctx):
    cells = [{'ctx': ctx, 'session_median_ms': medians} for ctx, medians in medians_by_ctx.items()]
    (folder / name).write_text(json.dumps({'cells': cells}))


def test_arms_are_paired_by_round_and_slot(tmp_path):
    # Round 2 runs 10% slower for both arms: the pairing keeps that drift out of the ratio.
    write(tmp_path, 'base1_tiny.json', {2048: [2.0, 2.0, 2.0], 16384: [4.0, 4.0, 4.0]})
    write(tmp_path, 'new1_tiny.json', {2048: [1.8, 1.8, 1.8], 16384: [4.0, 4.0, 4.0]})
    write(tmp_path, 'base2_tiny.json', {2048: [2.2, 2.2, 2.2], 16384: [4.4, 4.4, 4.4]})
    write(tmp_path, 'new2_tiny.json', {2048: [1.98, 1.98, 1.98], 16384: [4.4, 4.4, 4.4]})
    write(tmp_path, 'notes.json', {2048: [9.9]})   # not an arm's file: ignored
    rows = {(r['model'], r['ctx']): r for r in paired_summary.summarise(tmp_path)}
    assert set(rows) == {('tiny', 2048), ('tiny', 16384)}
    short = rows[('tiny', 2048)]
    assert short['pairs'] == 6
    assert abs(short['base_ms'] - 2.1) < 1e-9 and abs(short['new_ms'] - 1.89) < 1e-9
    assert abs(short['ratio'] - 0.9) < 1e-9
    low, high = short['ratio_ci95']
    assert abs(low - 0.9) < 1e-9 and abs(high - 0.9) < 1e-9   # every pair is 0.9 exactly
    assert rows[('tiny', 16384)]['ratio'] == 1.0


def test_only_slots_both_arms_measured_are_compared(tmp_path):
    write(tmp_path, 'base1_tiny.json', {2048: [2.0, 2.0, 2.0]})
    write(tmp_path, 'new1_tiny.json', {2048: [1.0, 1.0]})   # a session that never ran
    [row] = paired_summary.summarise(tmp_path)
    assert row['pairs'] == 2 and row['ratio'] == 0.5


def test_rounds_are_the_independent_pairs(tmp_path):
    # Each round's three sessions agree, but the rounds (processes) do not: -6% in round 1,
    # +2% in round 2. Pairing sessions counts six pairs and gives a narrow interval; over the
    # two rounds, the independent pairs, nothing is resolved.
    write(tmp_path, 'base1_tiny.json', {2048: [2.0, 2.001, 1.999]})
    write(tmp_path, 'new1_tiny.json', {2048: [1.88, 1.881, 1.879]})
    write(tmp_path, 'base2_tiny.json', {2048: [2.0, 2.001, 1.999]})
    write(tmp_path, 'new2_tiny.json', {2048: [2.04, 2.041, 2.039]})
    [row] = paired_summary.summarise(tmp_path)
    assert row['rounds'] == 2 and row['round_ratios'] == pytest.approx([0.94, 1.02])
    low, high = row['ratio_ci95']
    assert high - low < 0.1
    round_low, round_high = row['round_ratio_ci95']
    assert round_low < 0.9 and round_high > 1.1


def test_one_round_has_no_interval_over_rounds(tmp_path):
    write(tmp_path, 'base1_tiny.json', {2048: [2.0, 2.0]})
    write(tmp_path, 'new1_tiny.json', {2048: [1.0, 1.0]})
    [row] = paired_summary.summarise(tmp_path)
    assert row['rounds'] == 1 and row['round_ratio_ci95'] is None
