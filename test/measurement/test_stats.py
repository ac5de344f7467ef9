"""The A/B statistics: the bootstrap CI of paired session medians, the t interval of ratios."""

import numpy as np
from physinf_ros.measurement.stats import bootstrap_ratio_ci, ratio_t_ci
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


def test_t_interval_of_two_ratios_by_hand():
    # Two rounds, 0.98 and 1.02: mean log ~ 0, sd of logs 0.02829, t(1) = 12.706.
    ratio, low, high = ratio_t_ci([0.98, 1.02])
    half = 12.706 * np.std(np.log([0.98, 1.02]), ddof=1) / np.sqrt(2)
    mean = np.mean(np.log([0.98, 1.02]))
    assert ratio == pytest.approx(np.exp(mean))
    assert (low, high) == pytest.approx((np.exp(mean - half), np.exp(mean + half)))
    assert low < 0.8 and high > 1.2, 'two disagreeing rounds resolve nothing'


def test_t_interval_coverage_over_few_rounds():
    # Four rounds whose levels differ by 3% (processes): a 95% interval covers the truth in
    # about 95% of experiments; the bootstrap over rounds, with four, covers far fewer.
    rng = np.random.default_rng(5)
    trials, covered_t, covered_boot = 400, 0, 0
    for trial in range(trials):
        ratios = 0.98 * rng.lognormal(0.0, 0.03, 4)
        _, low, high = ratio_t_ci(ratios)
        covered_t += low <= 0.98 <= high
        _, low, high = bootstrap_ratio_ci(ratios, np.ones(4), resamples=2000, seed=trial)
        covered_boot += low <= 0.98 <= high
    assert 0.90 <= covered_t / trials <= 0.99
    assert covered_boot / trials < 0.85


def test_t_interval_needs_two_ratios():
    with pytest.raises(ValueError):
        ratio_t_ci([1.0])
    assert ratio_t_ci([1.5, 1.5, 1.5]) == pytest.approx((1.5, 1.5, 1.5))
