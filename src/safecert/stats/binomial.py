"""Exact (Clopper–Pearson) confidence bounds for a binomial failure probability.

For k failures in N i.i.d. Bernoulli(p) episodes and confidence 1−δ (docs/methods.md §1):

    upper(k, N, δ) = BetaInv(1−δ; k+1, N−k)   (= 1 when k = N)
    lower(k, N, δ) = BetaInv(δ;   k,   N−k+1) (= 0 when k = 0)

Each one-sided bound satisfies P_p(p ≤ upper) ≥ 1−δ (resp. P_p(p ≥ lower) ≥ 1−δ) for every N and
every p; the only assumption is that the N outcomes are i.i.d. Bernoulli(p).
"""

from __future__ import annotations

from dataclasses import dataclass

from scipy.special import betaincinv

from safecert.errors import ConfigError


@dataclass(frozen=True)
class BinomialBound:
    """One one-sided Clopper–Pearson bound."""

    failures: int
    episodes: int
    delta: float
    side: str  # "upper" or "lower"
    value: float

    @property
    def rate(self) -> float:
        return self.failures / self.episodes


@dataclass(frozen=True)
class BinomialInterval:
    """Two-sided Clopper–Pearson interval at confidence 1−δ (δ/2 in each tail)."""

    failures: int
    episodes: int
    delta: float
    lower: float
    upper: float


def validate_counts(failures: int, episodes: int) -> None:
    """Raise :class:`ConfigError` unless 0 ≤ failures ≤ episodes and episodes ≥ 1."""
    if episodes < 1:
        raise ConfigError(f"{episodes} must be at least 1", field="episodes", fix="pass N >= 1")
    if failures < 0:
        raise ConfigError(f"{failures} is negative", field="failures", fix="pass 0 <= K <= N")
    if failures > episodes:
        raise ConfigError(
            f"{failures} exceeds episodes={episodes}", field="failures", fix="pass 0 <= K <= N"
        )


def validate_delta(delta: float, field: str = "delta") -> None:
    """Raise :class:`ConfigError` unless 0 < δ < 1."""
    if not 0.0 < delta < 1.0:
        raise ConfigError(f"{delta} is outside (0, 1)", field=field, fix="use a value in (0, 1)")


def cp_upper(failures: int, episodes: int, delta: float) -> BinomialBound:
    """One-sided upper Clopper–Pearson bound: P(p ≤ value) ≥ 1−δ."""
    validate_counts(failures, episodes)
    validate_delta(delta)
    if failures == episodes:
        value = 1.0
    else:
        value = float(betaincinv(failures + 1, episodes - failures, 1.0 - delta))
    return BinomialBound(failures, episodes, delta, "upper", value)


def cp_lower(failures: int, episodes: int, delta: float) -> BinomialBound:
    """One-sided lower Clopper–Pearson bound: P(p ≥ value) ≥ 1−δ."""
    validate_counts(failures, episodes)
    validate_delta(delta)
    if failures == 0:
        value = 0.0
    else:
        value = float(betaincinv(failures, episodes - failures + 1, delta))
    return BinomialBound(failures, episodes, delta, "lower", value)


def cp_interval(failures: int, episodes: int, delta: float) -> BinomialInterval:
    """Two-sided Clopper–Pearson interval with coverage ≥ 1−δ (δ/2 per tail)."""
    lo = cp_lower(failures, episodes, delta / 2.0).value
    hi = cp_upper(failures, episodes, delta / 2.0).value
    return BinomialInterval(failures, episodes, delta, lo, hi)
