"""Sequential rules: boundaries against independent routes, exact validity, curtailment."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate
from scipy.stats import beta as beta_dist
from scipy.stats import binomtest
from statsmodels.stats.proportion import proportion_confint

from safecert.errors import ConfigError
from safecert.stats import cp_upper
from safecert.stats.sequential import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    UNDECIDED,
    cp_boundaries,
    curtailed_boundaries,
    decide,
    default_prior,
    fixed_n_pass_max,
    geometric_looks,
    looks_boundaries,
    mixture_boundaries,
    mixture_bounds,
    mixture_log_evalue,
    next_check,
    spending,
)
from safecert.stats.sequential_plan import operating_characteristics

P_STAR = 0.05
DELTA = 0.1
VALIDITY_P = (0.001, 0.01, 0.04, 0.05, 0.06, 0.2)


def test_spending_sums_below_delta():
    for kind in ("pi2", "uniform"):
        for j in (1, 5, 40):
            d = spending(DELTA, j, kind)
            assert d.sum() <= DELTA + 1e-15 and np.all(d > 0)
    assert spending(DELTA, 3, "pi2")[1] == pytest.approx(DELTA * 6 / (math.pi**2 * 4))
    with pytest.raises(ConfigError, match="spending"):
        spending(DELTA, 3, "greedy")


def test_geometric_looks():
    looks = geometric_looks(10, 100, 2.0)
    assert list(looks) == [10, 20, 40, 80, 100]
    with pytest.raises(ConfigError, match="look_ratio"):
        geometric_looks(10, 100, 1.0)


def test_looks_boundaries_match_scipy_and_statsmodels():
    b = looks_boundaries(P_STAR, DELTA / 9, 5000)
    for n, dj, a, f in zip(b.checks, b.deltas, b.pass_max, b.fail_min, strict=True):
        n, a, f = int(n), int(a), int(f)
        # PASS ⇔ exact one-sided binomial test of p ≥ p* rejects at δ_j (scipy.stats.binomtest)
        if a >= 0:
            assert binomtest(a, n, P_STAR, alternative="less").pvalue <= dj
            # statsmodels' two-sided Clopper–Pearson at 2δ_j has the one-sided δ_j upper bound
            assert proportion_confint(a, n, alpha=2 * dj, method="beta")[1] <= P_STAR
        assert binomtest(a + 1, n, P_STAR, alternative="less").pvalue > dj
        if f <= n:
            assert binomtest(f, n, P_STAR, alternative="greater").pvalue < dj
        assert binomtest(f - 1, n, P_STAR, alternative="greater").pvalue >= dj
    # the default first look is the first n where zero failures can pass at δ_1
    d1 = b.deltas[0]
    assert b.checks[0] == math.ceil(math.log(d1) / math.log(1 - P_STAR))
    assert b.pass_max[0] == 0


def test_mixture_evalue_against_numeric_integration():
    prior = default_prior(P_STAR)
    for k, n, p0 in [(0, 60, 0.05), (3, 200, 0.05), (30, 200, 0.05), (7, 40, 0.3)]:

        def integrand(u, k=k, n=n):  # t = u², which removes the prior's t^(a−1) singularity at 0
            t = u * u
            return t**k * (1 - t) ** (n - k) * beta_dist.pdf(t, *prior) * 2 * u

        marginal = integrate.quad(
            integrand, 0, 1, limit=400, points=[math.sqrt(k / n)], epsabs=0, epsrel=1e-12
        )[0]
        direct = math.log(marginal) - (k * math.log(p0) + (n - k) * math.log(1 - p0))
        assert float(mixture_log_evalue(k, n, p0, prior)) == pytest.approx(direct, rel=1e-7)


@pytest.mark.parametrize(
    ("p_star", "delta", "prior"),
    [
        (0.05, 0.1, None),
        (0.05, 0.0111, (1.0, 19.0)),
        (0.2, 0.05, (0.5, 0.5)),
        (0.01, 0.1, None),
        (0.05, 0.1, (50.0, 1.0)),
        (0.3, 0.2, (0.1, 20.0)),
    ],
)
def test_mixture_boundaries_brute_force(p_star, delta, prior):
    cap = 400
    b = mixture_boundaries(p_star, delta, cap, prior)
    prior = b.prior
    level = math.log(1 / delta)
    for n in range(1, cap + 1):
        ks = np.arange(n + 1)
        hits = mixture_log_evalue(ks, n, p_star, prior) >= level
        passes = ks[hits & (ks < n * p_star)]
        fails = ks[hits & (ks > n * p_star)]
        assert b.pass_max[n - 1] == (passes.max() if passes.size else -1)
        assert b.fail_min[n - 1] == (fails.min() if fails.size else n + 1)
        # the hit sets really are a prefix and a suffix
        assert passes.size == 0 or passes.size == passes.max() + 1
        assert fails.size == 0 or fails.size == n - fails.min() + 1


def test_mixture_bounds_are_the_level_set():
    prior = default_prior(P_STAR)
    level = math.log(1 / DELTA)
    for k, n in [(0, 80), (2, 150), (40, 300), (10, 10)]:
        lo, hi = mixture_bounds(k, n, DELTA, prior)
        assert lo <= k / n <= hi
        if hi < 1:
            assert float(mixture_log_evalue(k, n, hi, prior)) == pytest.approx(level, abs=1e-8)
        if lo > 0:
            assert float(mixture_log_evalue(k, n, lo, prior)) == pytest.approx(level, abs=1e-8)
    # decisions agree with the reported interval
    b = mixture_boundaries(P_STAR, DELTA, 300)
    rng = np.random.default_rng(3)
    for p in (0.0, 0.01, 0.2):
        res = decide(b, rng.random(300) < p)
        if res.decision == PASS:
            assert res.upper <= P_STAR + 1e-12
        if res.decision == FAIL:
            assert res.lower >= P_STAR - 1e-12


def test_mixture_rejects_bad_prior():
    with pytest.raises(ConfigError, match="prior"):
        mixture_boundaries(0.05, 0.1, 200, (0.0, 1.0))


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    p=st.sampled_from([0.0, 0.01, 0.03, 0.045, 0.05, 0.06, 0.3]),
    n_fixed=st.sampled_from([50, 300, 1000]),
)
def test_curtailment_takes_the_fixed_n_decision(seed, p, n_fixed):
    x = np.random.default_rng(seed).random(n_fixed) < p
    fixed = PASS if cp_upper(int(x.sum()), n_fixed, DELTA).value <= P_STAR else FAIL
    res = decide(curtailed_boundaries(P_STAR, DELTA, n_fixed), x)
    assert res.decision == fixed
    assert res.episodes <= n_fixed
    # the reported bounds bracket the fixed-N bounds of the real completion
    from safecert.stats import cp_lower

    assert res.upper >= cp_upper(int(x.sum()), n_fixed, DELTA).value - 1e-12
    assert res.lower <= cp_lower(int(x.sum()), n_fixed, DELTA).value + 1e-12


def test_curtailment_stops_as_soon_as_determined():
    n_fixed = 1000
    a_star = fixed_n_pass_max(n_fixed, P_STAR, DELTA)
    assert (
        cp_upper(a_star, n_fixed, DELTA).value
        <= P_STAR
        < cp_upper(a_star + 1, n_fixed, DELTA).value
    )
    b = curtailed_boundaries(P_STAR, DELTA, n_fixed)
    assert decide(b, np.ones(a_star + 1)).episodes == a_star + 1  # FAIL at the (a*+1)-th failure
    assert decide(b, np.zeros(n_fixed)).episodes == n_fixed - a_star  # PASS once determined


def test_decide_states_and_next_check():
    b = looks_boundaries(P_STAR, DELTA, 500)
    first = int(b.checks[0])
    assert decide(b, np.zeros(first - 1)).decision == UNDECIDED
    assert next_check(b, 0) == first and next_check(b, first) == int(b.checks[1])
    assert next_check(b, 500) == 500
    res = decide(b, np.zeros(first))
    assert (res.decision, res.episodes, res.failures) == (PASS, first, 0)
    assert res.upper == pytest.approx(cp_upper(0, first, b.deltas[0]).value)
    # at the cap with a rate at p*: typically neither
    x = np.zeros(500, dtype=int)
    x[::20] = 1
    assert decide(b, x).decision == INCONCLUSIVE
    with pytest.raises(ConfigError, match="outcomes"):
        decide(b, [0, 2])
    with pytest.raises(ConfigError, match="looks"):
        cp_boundaries(P_STAR, np.array([10, 5]), np.array([0.05, 0.05]))


def _rules(cap: int):
    return {
        "looks": looks_boundaries(P_STAR, DELTA, cap),
        "looks-uniform": looks_boundaries(P_STAR, DELTA, cap, kind="uniform"),
        "mixture": mixture_boundaries(P_STAR, DELTA, cap),
        "curtail": curtailed_boundaries(P_STAR, DELTA, cap),
    }


@pytest.mark.parametrize("name", ["looks", "looks-uniform", "mixture", "curtail"])
def test_exact_validity(name):
    """Exact (dynamic programme) error rates ≤ δ at the issue's p values."""
    b = _rules(2000)[name]
    for p in VALIDITY_P:
        oc = operating_characteristics(b, p)
        assert oc.pass_prob + oc.fail_prob + oc.inconclusive_prob == pytest.approx(1.0, abs=1e-9)
        if p >= P_STAR:
            assert oc.pass_prob <= DELTA, (p, oc)
        # curtail's FAIL is fixed N's "not PASS", not the claim p > p*: no wrong-FAIL bound
        if p <= P_STAR and name != "curtail":
            assert oc.fail_prob <= DELTA, (p, oc)
    # and the rules do decide clear cases
    assert operating_characteristics(b, 0.001).pass_prob > 0.99
    assert operating_characteristics(b, 0.2).fail_prob > 0.99


def naive_boundaries(cap: int, batch: int):
    """The invalid rule: Clopper–Pearson at the full δ after every batch (negative control)."""
    checks = np.arange(batch, cap + 1, batch)
    return cp_boundaries(P_STAR, checks, np.full(checks.size, DELTA))


def test_naive_peeking_exceeds_delta():
    oc = operating_characteristics(naive_boundaries(2000, 10), 0.055)
    assert oc.pass_prob > 2 * DELTA  # wrong PASS at p > p*: exact value ≈ 0.21


def _simulate(b, p: float, reps: int, rng: np.random.Generator) -> tuple[int, int]:
    """Monte Carlo over outcome sequences: binomial increments between checks."""
    steps = np.diff(np.concatenate([[0], b.checks]))
    k = np.cumsum(rng.binomial(steps, p, size=(reps, steps.size)), axis=1)
    crossed = (k <= b.pass_max) | (k >= b.fail_min)
    has = crossed.any(axis=1)
    j = crossed.argmax(axis=1)
    kk = k[np.arange(reps), j]
    passed = has & (kk <= b.pass_max[j])
    failed = has & (kk >= b.fail_min[j])
    return int(passed.sum()), int(failed.sum())


def test_dynamic_programme_matches_simulation():
    rng = np.random.default_rng(11)
    reps = 4000
    for b in (looks_boundaries(P_STAR, DELTA, 3000), naive_boundaries(1000, 10)):
        for p in (0.04, 0.055):
            oc = operating_characteristics(b, p)
            n_pass, n_fail = _simulate(b, p, reps, rng)
            for got, prob in ((n_pass, oc.pass_prob), (n_fail, oc.fail_prob)):
                sd = math.sqrt(reps * prob * (1 - prob)) + 1
                assert abs(got - reps * prob) < 5 * sd, (b.method, p, got, reps * prob)
