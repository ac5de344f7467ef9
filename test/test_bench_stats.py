"""The A/B statistics: bootstrap CI of a ratio, and the protocol's comparison of two cells."""

import numpy as np
from physinf_ros.bench.protocol import Cell, compare, Plan, prompt_ids, Session
from physinf_ros.measurement.stats import bootstrap_ratio_ci
import pytest

TRUE_RATIO = 1.26   # the paper's H100 graph speedup, as a known truth for synthetic samples


def session_medians(rng, step_ms, sessions=10, steps=30, spread=0.05):
    """Median of `steps` lognormal step times per session, sessions drifting a little."""
    drift = rng.lognormal(0.0, 0.02, sessions)
    return np.median(step_ms * drift[:, None] * rng.lognormal(0.0, spread, (sessions, steps)),
                     axis=1), drift


def test_ci_covers_a_known_ratio():
    rng = np.random.default_rng(7)
    eager, _ = session_medians(rng, 14.8)
    graphed, _ = session_medians(rng, 14.8 / TRUE_RATIO)
    ratio, low, high = bootstrap_ratio_ci(eager, graphed)
    assert low < TRUE_RATIO < high
    assert low <= ratio <= high
    assert low > 1.0, 'a 26% speedup with 5% noise must be distinguishable from none'


def test_ci_coverage_is_near_its_nominal_level():
    # Over many independent experiments a 95% interval should cover the truth most times.
    rng = np.random.default_rng(11)
    covered = 0
    trials = 200
    for trial in range(trials):
        eager, _ = session_medians(rng, 10.0, spread=0.2)
        graphed, _ = session_medians(rng, 10.0 / TRUE_RATIO, spread=0.2)
        _, low, high = bootstrap_ratio_ci(eager, graphed, resamples=2000, seed=trial)
        covered += low <= TRUE_RATIO <= high
    assert covered / trials >= 0.85


def test_pairing_follows_shared_drift():
    # Strong drift shared by both modes of a slot (clocks, heat) must not widen the CI much.
    rng = np.random.default_rng(3)
    drift = rng.lognormal(0.0, 0.3, 10)
    eager = 12.0 * drift
    graphed = 12.0 / TRUE_RATIO * drift * rng.lognormal(0.0, 0.005, 10)
    _, low, high = bootstrap_ratio_ci(eager, graphed)
    assert low < TRUE_RATIO < high and high - low < 0.05


def test_ci_needs_paired_samples():
    with pytest.raises(ValueError):
        bootstrap_ratio_ci([1.0, 2.0], [1.0])
    assert bootstrap_ratio_ci([2.0], [1.0]) == (2.0, 2.0, 2.0)


def _cell(mode, backend, medians):
    cell = Cell(mode, backend, 2048)
    cell.sessions = [Session(i, 1.0, [m, m, m]) for i, m in enumerate(medians)]
    return cell


def test_launch_fraction_only_for_a_real_graph_pair():
    eager = _cell('eager', 'eager', [10.0, 11.0, 10.5])
    graphed = _cell('graphed', 'graphed', [8.0, 8.8, 8.4])
    comparison = compare(eager, graphed)
    assert comparison.speedup == pytest.approx(31.5 / 25.2)
    assert comparison.launch_fraction == pytest.approx(1 - 25.2 / 31.5)
    # On a CPU 'graphed' ran as eager: same forward, no graph, no launch fraction.
    fallback = compare(eager, _cell('graphed', 'eager', [10.1, 10.9, 10.4]))
    assert fallback.launch_fraction is None and fallback.baseline == 'eager'
    assert compare(_cell('hf', 'hf', [20.0] * 3), graphed).launch_fraction is None


def test_plan_groups_modes_by_shared_weights_and_checks_itself():
    plan = Plan(modes=('hf', 'eager', 'graphed', 'hf-graphed'), contexts=(32, 64), steps=3,
                warmup=1, sessions=2)
    assert plan.families() == [('hf', 'hf-graphed'), ('eager', 'graphed')]
    assert plan.max_context(32) == 32 + 1 + 3 + 1
    assert plan.session_count() == 4 * 2 * 2
    assert plan.problems() == []
    bad = Plan(modes=('eager', 'warp'), contexts=(0,), steps=0)
    assert len(bad.problems()) == 3


def test_prompts_repeat_per_slot_and_rotate_between_slots():
    assert prompt_ids(1000, 64, 0, 3) == prompt_ids(1000, 64, 0, 3)
    assert prompt_ids(1000, 64, 0, 3) != prompt_ids(1000, 64, 0, 4)
    ids = prompt_ids(1000, 64, 0, 0)
    assert len(ids) == 64 and 0 <= min(ids) and max(ids) < 1000
