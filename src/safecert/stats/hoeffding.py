"""Hoeffding confidence bounds for the mean of a bounded episode statistic.

For N i.i.d. values G_i ∈ [a, b] with sample mean μ̂ and confidence 1−δ (docs/methods.md §1):

    LCB = μ̂ − (b−a)·sqrt(ln(1/δ) / (2N)),   UCB = μ̂ + (b−a)·sqrt(ln(1/δ) / (2N))

Each one-sided bound holds with probability ≥ 1−δ. The range [a, b] must be declared before
the data are seen; a value outside it voids the guarantee, so it is rejected.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from safecert.errors import ConfigError, DataError
from safecert.stats.binomial import validate_delta


@dataclass(frozen=True)
class HoeffdingBound:
    """A one-sided Hoeffding bound on a bounded mean."""

    mean: float
    episodes: int
    delta: float
    lower: float  # declared range a
    upper: float  # declared range b
    radius: float
    side: str  # "lower" (an LCB) or "upper" (a UCB)
    value: float


def hoeffding_radius(episodes: int, delta: float, span: float) -> float:
    """(b−a)·sqrt(ln(1/δ)/(2N))."""
    if episodes < 1:
        raise ConfigError(f"{episodes} must be at least 1", field="episodes", fix="pass N >= 1")
    validate_delta(delta)
    return span * math.sqrt(math.log(1.0 / delta) / (2.0 * episodes))


def _check_range(lower: float, upper: float) -> None:
    if not (math.isfinite(lower) and math.isfinite(upper) and lower < upper):
        raise ConfigError(
            f"range [{lower}, {upper}] is not a finite interval with lower < upper",
            field="range",
            fix="declare finite bounds with lower < upper",
        )


def _mean_in_range(values: np.ndarray, lower: float, upper: float) -> float:
    _check_range(lower, upper)
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        raise DataError("no values", field="values", fix="provide at least one episode")
    if not np.all(np.isfinite(arr)) or arr.min() < lower or arr.max() > upper:
        raise DataError(
            f"values span [{arr.min()}, {arr.max()}], outside the declared range [{lower}, {upper}]",
            field="range",
            fix="declare a range that contains every possible value",
        )
    return float(arr.mean())


def hoeffding_from_mean(
    mean: float, episodes: int, delta: float, lower: float, upper: float, side: str
) -> HoeffdingBound:
    """Hoeffding bound from a precomputed mean (used to check published tables)."""
    _check_range(lower, upper)
    if side not in ("lower", "upper"):
        raise ConfigError(f"{side!r} is not a side", field="side", fix="use 'lower' or 'upper'")
    radius = hoeffding_radius(episodes, delta, upper - lower)
    value = mean - radius if side == "lower" else mean + radius
    return HoeffdingBound(mean, episodes, delta, lower, upper, radius, side, value)


def hoeffding_lcb(values: np.ndarray, delta: float, lower: float, upper: float) -> HoeffdingBound:
    """Lower confidence bound on E[G]: P(E[G] ≥ value) ≥ 1−δ."""
    mean = _mean_in_range(values, lower, upper)
    return hoeffding_from_mean(mean, int(np.asarray(values).size), delta, lower, upper, "lower")


def hoeffding_ucb(values: np.ndarray, delta: float, lower: float, upper: float) -> HoeffdingBound:
    """Upper confidence bound on E[G]: P(E[G] ≤ value) ≥ 1−δ."""
    mean = _mean_in_range(values, lower, upper)
    return hoeffding_from_mean(mean, int(np.asarray(values).size), delta, lower, upper, "upper")
