"""Sample-size planning for Clopper–Pearson certificates.

The smallest N with upper(k, N, δ) ≤ p* for a planned number k of failures (docs/methods.md §1,
CORE-RL Table 68). upper(k, N, δ) is strictly decreasing in N, so a bisection finds it exactly.
With zero failures the bound is 1 − δ^{1/N}, giving N = ⌈ln δ / ln(1−p*)⌉.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from safecert.errors import ConfigError
from safecert.stats.binomial import cp_upper, validate_delta


@dataclass(frozen=True)
class SamplePlan:
    """Minimum episodes for a planned failure count and the bound that N achieves."""

    failures: int
    episodes: int
    upper_bound: float
    p_star: float
    delta: float


def validate_p_star(p_star: float) -> None:
    if not 0.0 < p_star < 1.0:
        raise ConfigError(f"{p_star} is outside (0, 1)", field="p_star", fix="use 0 < p* < 1")


def zero_failure_episodes(p_star: float, delta: float) -> int:
    """Closed form N = ⌈ln δ / ln(1−p*)⌉ for k = 0."""
    validate_p_star(p_star)
    validate_delta(delta)
    n = math.ceil(math.log(delta) / math.log1p(-p_star))
    # Guard the ceiling against floating-point ties.
    while n > 1 and 1.0 - delta ** (1.0 / (n - 1)) <= p_star:
        n -= 1
    while 1.0 - delta ** (1.0 / n) > p_star:
        n += 1
    return n


def min_episodes(failures: int, p_star: float, delta: float) -> SamplePlan:
    """Smallest N ≥ k+1 with upper(k, N, δ) ≤ p*, found by exponential search then bisection."""
    validate_p_star(p_star)
    validate_delta(delta)
    if failures < 0:
        raise ConfigError(f"{failures} is negative", field="failures", fix="plan K >= 0 failures")

    def ok(n: int) -> bool:
        return cp_upper(failures, n, delta).value <= p_star

    lo = failures + 1  # upper(k, k+1) > p* would be checked below
    if ok(lo):
        hi = lo
    else:
        hi = max(2 * lo, zero_failure_episodes(p_star, delta))
        while not ok(hi):
            lo, hi = hi, 2 * hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if ok(mid):
                hi = mid
            else:
                lo = mid
    return SamplePlan(failures, hi, cp_upper(failures, hi, delta).value, p_star, delta)
