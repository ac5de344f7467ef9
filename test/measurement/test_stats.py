"""The A/B statistics: the bootstrap CI of a ratio of paired session medians."""

import numpy as np
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
