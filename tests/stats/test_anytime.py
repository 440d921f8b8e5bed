"""The stitched time-uniform Hoeffding boundary (safecert.stats.anytime)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from safecert.errors import ConfigError
from safecert.stats.anytime import GROWTH, anytime_deviation


def _by_hand(n: int, log_inv: float, g: float = GROWTH) -> float:
    """min over epochs j = 0..200 of L_j/(λ_j n) + λ_j/8, plain Python (independent route)."""
    best = math.inf
    for j in range(200):
        big_l = log_inv + math.log((j + 1) * (j + 2))
        lam = math.sqrt(8 * big_l / (g**j * math.sqrt(g)))
        best = min(best, big_l / (lam * n) + lam / 8)
    return best


@pytest.mark.parametrize("n", [1, 2, 7, 100, 12_345, 10**6, 10**9])
@pytest.mark.parametrize("log_inv", [0.5, 3.0, 12.0])
def test_matches_the_formula_by_hand(n, log_inv):
    assert float(anytime_deviation(n, log_inv)) == pytest.approx(_by_hand(n, log_inv), rel=1e-12)


def test_never_below_fixed_n_hoeffding_and_about_a_third_above():
    """Each line is ≥ the fixed-n optimum sqrt(ln(1/δ)/(2n)); the price is a bounded factor."""
    n = np.unique(np.logspace(0, 8, 400).astype(int))
    for log_inv, factor in ((1.0, 3.5), (9.0, 1.45)):
        d = anytime_deviation(n, log_inv)
        fixed = np.sqrt(log_inv / (2 * n))
        assert np.all(d >= fixed) and np.all(d <= factor * fixed)
    assert np.isinf(anytime_deviation(0, 3.0)) and anytime_deviation([5, 50], 3.0).shape == (2,)


def test_errors():
    with pytest.raises(ConfigError, match="growth"):
        anytime_deviation(5, 1.0, growth=1.0)
    with pytest.raises(ConfigError, match="delta"):
        anytime_deviation(5, 0.0)


def test_coverage_over_whole_paths_and_the_fixed_n_bound_fails_it():
    """P(∃ n ≤ N: mean_n − p ≥ d(n)) ≤ δ over 4,000 paths of 2,000 Bernoulli draws; the fixed-n
    bound, applied at every n, is crossed by far more than δ of the paths (so the test can fail)."""
    rng = np.random.default_rng(7)
    delta, paths, length = 0.1, 4000, 2000
    n = np.arange(1, length + 1)
    d = anytime_deviation(n, math.log(1 / delta))
    fixed = np.sqrt(math.log(1 / delta) / (2 * n))
    for p in (0.5, 0.1):
        x = rng.random((paths, length)) < p
        dev = np.cumsum(x - p, axis=1) / n
        ever = (dev >= d).any(axis=1).mean()
        naive = (dev >= fixed).any(axis=1).mean()
        assert ever <= delta  # in practice far below: Ville is conservative
        assert p != 0.5 or naive > 1.5 * delta
