from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from statsmodels.stats.proportion import proportion_confint

from safecert.errors import ConfigError
from safecert.stats import cp_interval, cp_lower, cp_upper


def test_closed_forms_at_the_edges():
    # k = 0: upper = 1 - δ^(1/N); k = N: lower = δ^(1/N).
    for n in (1, 7, 45, 1000):
        for d in (0.1, 0.01):
            assert cp_upper(0, n, d).value == pytest.approx(1 - d ** (1 / n), rel=1e-12)
            assert cp_lower(n, n, d).value == pytest.approx(d ** (1 / n), rel=1e-12)
            assert cp_upper(n, n, d).value == 1.0
            assert cp_lower(0, n, d).value == 0.0


@pytest.mark.parametrize(("k", "expected"), [(81, 0.0104), (460, 0.0510), (1952, 0.2044)])
def test_table2_bonferroni(k, expected):
    # CORE-RL Table 2: N = 10,000, δ = 0.1, M = 9.
    assert round(cp_upper(k, 10_000, 0.1 / 9).value, 4) == expected


def test_agrees_with_statsmodels_beta():
    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(1, 5000))
        k = int(rng.integers(0, n + 1))
        delta = float(rng.uniform(0.001, 0.4))
        lo, hi = proportion_confint(k, n, alpha=delta, method="beta")
        iv = cp_interval(k, n, delta)
        assert iv.lower == pytest.approx(lo, abs=1e-12)
        assert iv.upper == pytest.approx(hi, abs=1e-12)
        # one-sided upper at δ is the two-sided upper at 2δ
        lo2, hi2 = (
            proportion_confint(k, n, alpha=2 * delta, method="beta") if delta < 0.5 else (0, 1)
        )
        assert cp_upper(k, n, delta).value == pytest.approx(hi2, abs=1e-12)
        assert cp_lower(k, n, delta).value == pytest.approx(lo2, abs=1e-12)


@pytest.mark.parametrize("p", [0.001, 0.02, 0.05, 0.3])
def test_coverage_by_simulation(p):
    rng = np.random.default_rng(int(p * 1e4))
    n, delta, reps = 200, 0.1, 4000
    ks = rng.binomial(n, p, size=reps)
    uppers = np.array([cp_upper(int(k), n, delta).value for k in np.unique(ks)])
    lookup = dict(zip(np.unique(ks), uppers, strict=True))
    covered = np.mean([p <= lookup[k] for k in ks])
    # exact coverage ≥ 0.9; allow 3 binomial standard errors of Monte-Carlo noise
    assert covered >= 1 - delta - 3 * np.sqrt(delta * (1 - delta) / reps)


@given(
    n=st.integers(1, 3000),
    frac=st.floats(0, 1),
    delta=st.floats(0.001, 0.5),
)
@settings(max_examples=200, deadline=None)
def test_monotonicity(n, frac, delta):
    k = int(frac * n)
    up = cp_upper(k, n, delta).value
    lo = cp_lower(k, n, delta).value
    assert lo <= k / n <= up
    if k < n:
        assert cp_upper(k + 1, n, delta).value >= up  # increases with k
    assert cp_upper(k, n + 1, delta).value <= up  # decreases with N
    assert cp_upper(k, n, delta / 2).value >= up  # increases with confidence


def test_bad_input_raises_named_errors():
    with pytest.raises(ConfigError, match="failures"):
        cp_upper(5, 3, 0.1)
    with pytest.raises(ConfigError, match="delta"):
        cp_upper(1, 3, 1.5)
