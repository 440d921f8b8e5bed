"""Betting confidence sequences for a Bernoulli failure rate (Waudby-Smith & Ramdas, 2023).

Two capital processes, one per claim, with predictable plug-in bets (each bet uses only the
episodes before it, in index order):

    PASS wealth  W⁺_n(p0) = Π_i (1 + λ_i (p0 − X_i)),   λ_i ∈ [0, 1]
    FAIL wealth  W⁻_n(p0) = Π_i (1 + μ_i (X_i − p0)),   μ_i ∈ [0, 1]

For true p ≥ p0, E[1 + λ(p0 − X)] = 1 + λ(p0 − p) ≤ 1, so W⁺(p0) is a non-negative
supermartingale and Ville's inequality gives P(∃n: W⁺_n(p0) ≥ 1/δ) ≤ δ; symmetrically for W⁻ and
p ≤ p0. Bets in [0, 1] keep every factor ≥ 0 for every p0 ∈ [0, 1], and make W⁺_n(p0) increasing
and W⁻_n(p0) decreasing in p0, so the confidence sets are intervals:

    U_n = inf{p0 : W⁺_n(p0) ≥ 1/δ},   L_n = sup{p0 : W⁻_n(p0) ≥ 1/δ}

PASS iff W⁺_n(p*) ≥ 1/δ (⇔ U_n ≤ p*); FAIL iff W⁻_n(p*) ≥ 1/δ (⇔ L_n ≥ p*). As in
:mod:`safecert.stats.sequential`, each claim uses the full δ because for a given p only one of
the two errors is possible. Bets: the Kelly bet against p* for the plug-in estimate
θ̂_i = (k_{i−1} + 1/2)/i, clipped to [0, 1].
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from safecert.errors import ConfigError
from safecert.stats.binomial import validate_delta
from safecert.stats.planning import validate_p_star
from safecert.stats.sequential import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    UNDECIDED,
    SequentialDecision,
)


def plug_in_bets(outcomes: np.ndarray, p_star: float) -> tuple[np.ndarray, np.ndarray]:
    """Predictable bets (λ_i, μ_i) for each row of a (R, n) 0/1 matrix (or a 1-D vector)."""
    x = np.atleast_2d(np.asarray(outcomes, dtype=float))
    i = np.arange(1, x.shape[1] + 1, dtype=float)
    before = np.cumsum(x, axis=1) - x  # failures strictly before episode i
    theta = (before + 0.5) / i
    kelly = (p_star - theta) / (p_star * (1.0 - p_star))
    return np.clip(kelly, 0.0, 1.0), np.clip(-kelly, 0.0, 1.0)


def log_wealth(outcomes: np.ndarray, p_star: float, p0: float) -> tuple[np.ndarray, np.ndarray]:
    """Running log W⁺_n(p0) and log W⁻_n(p0), n = 1 … (same shape as ``outcomes``)."""
    x = np.atleast_2d(np.asarray(outcomes, dtype=float))
    lam, mu = plug_in_bets(x, p_star)
    with np.errstate(divide="ignore"):
        up = np.cumsum(np.log1p(lam * (p0 - x)), axis=1)
        down = np.cumsum(np.log1p(mu * (x - p0)), axis=1)
    return up, down


@dataclass(frozen=True)
class BettingRule:
    """Sequential PASS/FAIL rule from the two betting capital processes, checked every episode."""

    p_star: float
    delta: float
    cap: int
    method: str = "betting"

    def __post_init__(self) -> None:
        validate_p_star(self.p_star)
        validate_delta(self.delta)
        if self.cap < 1:
            raise ConfigError(f"{self.cap} must be >= 1", field="cap", fix="use cap >= 1")

    def describe(self) -> dict:
        return {
            "method": self.method,
            "p_star": self.p_star,
            "delta": self.delta,
            "cap": self.cap,
            "checks": self.cap,
            "bets": "plug-in Kelly vs p*, theta=(k+1/2)/i, clipped to [0, 1]",
        }

    def next_check(self, episodes: int) -> int:
        return min(self.cap, episodes + 1)

    def stopping(self, outcomes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised over rows: (decision code, episodes used); code 1 PASS, −1 FAIL, 0 none."""
        x = np.atleast_2d(np.asarray(outcomes, dtype=float))[:, : self.cap]
        up, down = log_wealth(x, self.p_star, self.p_star)
        level = math.log(1.0 / self.delta)
        hit = (up >= level) | (down >= level)
        any_hit = hit.any(axis=1)
        first = np.where(any_hit, hit.argmax(axis=1), x.shape[1] - 1)
        rows = np.arange(x.shape[0])
        code = np.where(any_hit, np.where(up[rows, first] >= level, 1, -1), 0)
        return code, first + 1

    def bounds(self, outcomes: np.ndarray) -> tuple[float, float]:
        """(L_n, U_n) after all the given outcomes, by root finding on the monotone wealth."""
        from scipy.optimize import brentq  # lazy: keeps `safecert --help` fast

        x = np.asarray(outcomes, dtype=float)
        level = math.log(1.0 / self.delta)

        def up(p0: float) -> float:
            return float(log_wealth(x, self.p_star, p0)[0][0, -1]) - level

        def down(p0: float) -> float:
            return float(log_wealth(x, self.p_star, p0)[1][0, -1]) - level

        upper = 1.0 if up(1.0) < 0 else (0.0 if up(0.0) >= 0 else brentq(up, 0.0, 1.0, xtol=1e-12))
        lower = (
            0.0
            if down(0.0) < 0
            else (1.0 if down(1.0) >= 0 else brentq(down, 0.0, 1.0, xtol=1e-12))
        )
        return float(lower), float(upper)

    def decide(self, outcomes: np.ndarray | list[bool]) -> SequentialDecision:
        """Same contract as :func:`safecert.stats.sequential.decide`."""
        x = np.asarray(outcomes, dtype=np.int64)
        if x.ndim != 1 or np.any((x != 0) & (x != 1)):
            raise ConfigError(
                "outcomes must be a 0/1 vector", field="outcomes", fix="pass failures"
            )
        if x.size == 0:
            return SequentialDecision(UNDECIDED, 0, 0, None, 0.0, 1.0)
        code, used = self.stopping(x)
        n = int(used[0])
        if code[0] == 0:
            verdict = INCONCLUSIVE if x.size >= self.cap else UNDECIDED
        else:
            verdict = PASS if code[0] == 1 else FAIL
        lower, upper = self.bounds(x[:n])
        return SequentialDecision(verdict, n, int(x[:n].sum()), n - 1, lower, upper)
