"""Betting confidence sequences: wealth against a direct loop, intervals, validity by simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from safecert.errors import ConfigError
from safecert.stats.betting import BettingRule, log_wealth, plug_in_bets
from safecert.stats.sequential import FAIL, PASS, UNDECIDED

P_STAR = 0.05
DELTA = 0.1


def _direct_wealth(x, p_star, p0):
    """Independent plain-Python loop of the two capital processes."""
    up = down = 1.0
    k = 0
    for i, xi in enumerate(x, start=1):
        theta = (k + 0.5) / i
        kelly = (p_star - theta) / (p_star * (1 - p_star))
        lam = min(1.0, max(0.0, kelly))
        mu = min(1.0, max(0.0, -kelly))
        up *= 1 + lam * (p0 - xi)
        down *= 1 + mu * (xi - p0)
        k += xi
    return up, down


def test_wealth_matches_direct_loop():
    rng = np.random.default_rng(0)
    for p in (0.0, 0.02, 0.3):
        x = (rng.random(300) < p).astype(int)
        for p0 in (0.03, 0.05, 0.2):
            up, down = log_wealth(x, P_STAR, p0)
            du, dd = _direct_wealth(list(x), P_STAR, p0)
            assert math.exp(up[0, -1]) == pytest.approx(du, rel=1e-9)
            assert math.exp(down[0, -1]) == pytest.approx(dd, rel=1e-9)


def test_bets_are_predictable():
    x = np.array([[0, 0, 1, 0, 1, 1, 0]])
    lam, mu = plug_in_bets(x, P_STAR)
    y = x.copy()
    y[0, 4:] = 1 - y[0, 4:]  # changing the future leaves bets up to and including index 4 alone
    lam2, mu2 = plug_in_bets(y, P_STAR)
    assert np.array_equal(lam[0, :5], lam2[0, :5]) and np.array_equal(mu[0, :5], mu2[0, :5])


def test_intervals_and_decisions_consistent():
    rule = BettingRule(P_STAR, DELTA, 2000)
    level = math.log(1 / DELTA)
    rng = np.random.default_rng(5)
    seen = set()
    for p in (0.0, 0.01, 0.3, 0.8):
        x = (rng.random(2000) < p).astype(int)
        res = rule.decide(x)
        seen.add(res.decision)
        lo, hi = res.lower, res.upper
        if res.decision == PASS:
            assert hi <= P_STAR + 1e-9
            up, _ = log_wealth(x[: res.episodes], P_STAR, hi)
            assert up[0, -1] == pytest.approx(level, abs=1e-6)
        if res.decision == FAIL:
            assert lo >= P_STAR - 1e-9
        # the decision is the first crossing: one episode earlier no crossing
        up, down = log_wealth(x[: res.episodes - 1], P_STAR, P_STAR)
        if res.episodes > 1:
            assert up.max() < level and down.max() < level
    assert seen == {PASS, FAIL}
    assert rule.decide([0] * 5).decision == UNDECIDED
    assert rule.next_check(5) == 6
    with pytest.raises(ConfigError, match="cap"):
        BettingRule(P_STAR, DELTA, 0)


def test_betting_validity_simulation():
    """Wrong PASS (p ≥ p*) and wrong FAIL (p ≤ p*) frequencies ≤ δ (2000 runs, cap 1000)."""
    rule = BettingRule(P_STAR, DELTA, 1000)
    rng = np.random.default_rng(2026)
    reps = 2000
    limit = reps * DELTA + 5 * math.sqrt(reps * DELTA * (1 - DELTA))
    for p in (0.001, 0.01, 0.04, 0.05, 0.06, 0.2):
        code, _ = rule.stopping((rng.random((reps, 1000)) < p).astype(np.int8))
        if p >= P_STAR:
            assert np.sum(code == 1) <= limit, p
        if p <= P_STAR:
            assert np.sum(code == -1) <= limit, p
    code, used = rule.stopping((rng.random((500, 1000)) < 0.001).astype(np.int8))
    assert np.mean(code == 1) > 0.95 and np.median(used) < 200
