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


# --- the pure-Python bound against independent computations -------------------------------

mp = pytest.importorskip("mpmath")


def _mp_cdf(k: int, n: int, p):  # noqa: ANN001, ANN202 — 50-digit P(X ≤ k) by direct summation
    q = 1 - p
    term = q**n
    total = term
    for j in range(1, k + 1):
        term = term * (n - j + 1) / j * p / q
        total += term
    return total


def _mp_root(f, guess: float):  # noqa: ANN001, ANN202 — 50-digit bisection around a float guess
    lo, hi = mp.mpf(guess) * (1 - mp.mpf("1e-6")), mp.mpf(guess) * (1 + mp.mpf("1e-6"))
    f_lo = f(lo)
    assert f_lo * f(hi) < 0
    for _ in range(120):
        mid = (lo + hi) / 2
        f_mid = f(mid)
        if (f_mid < 0) == (f_lo < 0):
            lo, f_lo = mid, f_mid
        else:
            hi = mid
    return (lo + hi) / 2


def test_stirling_table_and_pmf_against_50_digit_arithmetic():
    from safecert.stats.binomial import _STIRLERR, binomial_pmf

    with mp.workdps(50):
        for n in range(1, 16):
            exact = mp.log(mp.factorial(n)) - (n + mp.mpf(1) / 2) * mp.log(n) + n
            exact -= mp.log(2 * mp.pi) / 2
            assert _STIRLERR[n] == pytest.approx(float(exact), rel=1e-16)
        for n, x, p in [
            (1, 0, 0.3),
            (45, 3, 0.05),
            (10_000, 81, 0.0104),
            (10_000, 5_000, 0.5),
            (10**6, 1, 1e-15),
            (10**7, 0, 2e-6),
            (10**7, 10**7, 0.999999),
            (10**9, 5, 9.27e-9),
            (300, 299, 0.99),
        ]:
            exact = mp.binomial(n, x) * mp.mpf(p) ** x * (1 - mp.mpf(p)) ** (n - x)
            assert binomial_pmf(x, n, p) == pytest.approx(float(exact), rel=1e-13)


@pytest.mark.parametrize(
    ("k", "n", "delta"),
    [
        (0, 45, 0.05),
        (3, 45, 0.05),
        (44, 45, 0.05),
        (81, 10_000, 0.1 / 9),
        (460, 10_000, 0.1 / 9),
        (1, 10**6, 1e-9),
        (5, 10**9, 0.1),
        (200, 10**7, 0.01),
        (7, 20, 0.9),
    ],
)
def test_bounds_equal_50_digit_roots(k, n, delta):
    with mp.workdps(50):
        if k < n:
            value = cp_upper(k, n, delta).value
            exact = _mp_root(lambda p: _mp_cdf(k, n, p) - mp.mpf(delta), value)
            assert value == pytest.approx(float(exact), rel=1e-14)
        if k > 0:
            value = cp_lower(k, n, delta).value
            exact = _mp_root(lambda p: 1 - _mp_cdf(k - 1, n, p) - mp.mpf(delta), value)
            assert value == pytest.approx(float(exact), rel=1e-14)


def test_agrees_with_scipy_betaincinv_over_a_wide_grid():
    from scipy.special import betaincinv

    rng = np.random.default_rng(1)
    for _ in range(400):
        n = int(10 ** rng.uniform(0, 6))
        k = int(rng.integers(0, n + 1))
        delta = float(10 ** rng.uniform(-6, np.log10(0.9)))
        upper = 1.0 if k == n else float(betaincinv(k + 1, n - k, 1 - delta))
        lower = 0.0 if k == 0 else float(betaincinv(k, n - k + 1, delta))
        assert cp_upper(k, n, delta).value == pytest.approx(upper, rel=1e-11, abs=1e-300)
        assert cp_lower(k, n, delta).value == pytest.approx(lower, rel=1e-11, abs=1e-300)


def test_tails_sum_to_one_and_match_the_pmf_sum():
    from safecert.stats.binomial import binomial_pmf, binomial_tails

    for n, p in [(30, 0.2), (200, 0.01), (1000, 0.7), (50, 1e-12)]:
        for k in range(0, n + 1, max(1, n // 25)):
            below, above = binomial_tails(k, n, p)
            direct = sum(binomial_pmf(j, n, p) for j in range(k + 1))
            assert below == pytest.approx(direct, rel=1e-12, abs=1e-300)
            assert below + above == pytest.approx(1.0, abs=1e-14)


def test_sizes_whose_tail_sums_would_not_end_are_refused():
    """The tail sums take about √min(k, N − k) terms: beyond the stated limits the bound is a
    ConfigError naming the field (a `bound` at N = 10^18, k = N/2 used to run without end)."""
    from safecert.stats.binomial import MAX_EPISODES, MAX_MINORITY

    with pytest.raises(ConfigError, match="episodes"):
        cp_upper(5, MAX_EPISODES + 1, 0.1)
    with pytest.raises(ConfigError, match="failures"):
        cp_upper(MAX_MINORITY + 1, 2 * MAX_MINORITY + 2, 0.1)
    # at the limits, small k on huge N and the closed forms still answer
    assert 0.0 < cp_upper(5, MAX_EPISODES, 0.1).value < 1e-14
    assert cp_lower(MAX_EPISODES, MAX_EPISODES, 0.1).value < 1.0
