"""The one-sided e-process rule: closed forms vs quadrature, exact error rates, boundaries vs brute
force, bounds consistent with decisions, and its episode counts beside the two-sided mixture."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.integrate import quad

from safecert.stats.eprocess import (
    PASS_PRIOR_A,
    fail_log_evalue,
    fail_prior_b,
    onesided_bounds,
    pass_log_evalue,
)
from safecert.stats.sequential_plan import make_rule, operating_characteristics


def _quad_pass(k: int, n: int, p0: float) -> float:
    """E⁺ by numerical integration of the mixture of likelihood ratios (independent route)."""
    a = PASS_PRIOR_A

    def lr(q: float) -> float:
        return math.exp(k * math.log(q / p0) + (n - k) * math.log((1 - q) / (1 - p0)))

    mass = quad(lambda q: q ** (a - 1), 0, p0)[0]
    return quad(lambda q: lr(q) * q ** (a - 1), 0, p0, limit=200, points=[k / n])[0] / mass


def _quad_fail(k: int, n: int, p0: float) -> float:
    b = fail_prior_b(p0)

    def lr(q: float) -> float:
        return math.exp(k * math.log(q / p0) + (n - k) * math.log((1 - q) / (1 - p0)))

    mass = quad(lambda q: (1 - q) ** (b - 1), p0, 1)[0]
    inside = min(max(k / n, p0), 1.0)
    return quad(lambda q: lr(q) * (1 - q) ** (b - 1), p0, 1, limit=200, points=[inside])[0] / mass


@pytest.mark.parametrize(
    "k, n, p0", [(0, 10, 0.05), (0, 59, 0.05), (3, 200, 0.05), (8, 40, 0.1), (1, 5, 0.3)]
)
def test_closed_forms_equal_quadrature(k, n, p0):
    assert math.exp(pass_log_evalue(k, n, p0)) == pytest.approx(_quad_pass(k, n, p0), rel=1e-7)
    assert math.exp(fail_log_evalue(k, n, p0)) == pytest.approx(_quad_fail(k, n, p0), rel=1e-7)


@pytest.mark.parametrize("p_star, delta", [(0.05, 0.1), (0.1, 0.05), (0.01, 0.1), (0.3, 0.01)])
def test_error_rates_are_at_most_delta_exactly(p_star, delta):
    """Exact DP over the failure count: a wrong PASS at p ∈ {p*, 1.1 p*} and a wrong FAIL at
    p ∈ {0.9 p*, p*} each have probability ≤ δ (the full δ on each side: see the module)."""
    rule = make_rule("onesided", p_star, delta, 3000)
    for p in (p_star * 1.1, p_star):
        assert operating_characteristics(rule, p).pass_prob <= delta
    for p in (p_star * 0.9, p_star):
        assert operating_characteristics(rule, p).fail_prob <= delta


def test_simulated_error_rates_agree_with_the_exact_ones():
    """10^4 simulated cells at p = p* (independent of the DP): the wrong-PASS rate is ≤ δ."""
    rule = make_rule("onesided", 0.05, 0.1, 1500)
    rng = np.random.default_rng(7)
    x = (rng.random((10_000, 1500)) < 0.05).astype(np.int64)
    passed = sum(rule.decide(row).decision == "PASS" for row in x)
    exact = operating_characteristics(rule, 0.05).pass_prob
    assert passed / 10_000 <= 0.1
    assert abs(passed / 10_000 - exact) < 4 * math.sqrt(exact * (1 - exact) / 10_000)


def test_boundaries_equal_a_brute_force_scan():
    rule = make_rule("onesided", 0.05, 0.1, 400)
    level = math.log(10)
    for j, n in enumerate(rule.checks):
        ks = np.arange(n + 1)
        passing = ks[pass_log_evalue(ks, n, 0.05) >= level]
        failing = ks[fail_log_evalue(ks, n, 0.05) >= level]
        assert rule.pass_max[j] == (passing.max() if passing.size else -1)
        assert rule.fail_min[j] == (failing.min() if failing.size else n + 1)
        assert passing.size == 0 or np.array_equal(passing, np.arange(passing.max() + 1))


@pytest.mark.parametrize("k, n", [(0, 30), (0, 100), (2, 150), (5, 60), (20, 80)])
def test_bounds_invert_the_tests_and_match_the_decisions(k, n):
    lower, upper = onesided_bounds(k, n, 0.1)
    assert lower <= k / n <= upper
    grid = np.linspace(max(k / n, 1e-6), 0.999, 400)
    e_up = np.array([pass_log_evalue(k, n, p0) for p0 in grid])
    assert np.all(np.diff(e_up) >= -1e-9)  # increasing in p0 above k/n: the bound is the crossing
    assert pass_log_evalue(k, n, upper) == pytest.approx(math.log(10), abs=1e-6)
    rule = make_rule("onesided", 0.05, 0.1, n)
    decision = rule.decide([1] * k + [0] * (n - k))
    assert (decision.decision == "PASS") == (upper <= 0.05) or decision.episodes < n


def test_zero_failure_cell_and_power_beside_the_two_sided_mixture():
    """At p* = 0.05, δ = 0.1: a failure-free cell passes after 59 episodes, and the one-sided rule
    needs no more episodes (median, exact) than the two-sided mixture at any of the rates."""
    one = make_rule("onesided", 0.05, 0.1, 3000)
    two = make_rule("mixture", 0.05, 0.1, 3000)
    assert one.decide([0] * 59).decision == "PASS"
    assert one.decide([0] * 58).decision == "UNDECIDED"
    for p in (0.0, 0.01, 0.02, 0.03, 0.1, 0.2):
        assert (
            operating_characteristics(one, p).median_episodes
            <= operating_characteristics(two, p).median_episodes
        )
    assert operating_characteristics(one, 0.02).median_episodes <= 210
