"""Exact (Clopper–Pearson) confidence bounds for a binomial failure probability.

For k failures in N i.i.d. Bernoulli(p) episodes and confidence 1−δ (docs/methods.md §1):

    upper(k, N, δ) = the p with P_p(X ≤ k) = δ   (= BetaInv(1−δ; k+1, N−k); = 1 when k = N)
    lower(k, N, δ) = the p with P_p(X ≥ k) = δ   (= BetaInv(δ; k, N−k+1);   = 0 when k = 0)

Each one-sided bound satisfies P_p(p ≤ upper) ≥ 1−δ (resp. P_p(p ≥ lower) ≥ 1−δ) for every N and
every p; the only assumption is that the N outcomes are i.i.d. Bernoulli(p).

The bounds are computed here in pure Python, without SciPy: binomial probabilities by Loader's
saddle-point method (the algorithm of R's ``dbinom``: Stirling-series remainders and the deviance
``bd0``, accurate to a few units in the last place for every N), tails by summing from the
quantile outwards until the remainder is below 2⁻⁶⁰ of the sum, and the bound by a bracketed
Newton iteration on the log tail. The test suite checks the values against 40-digit mpmath and
against SciPy's Boost-based ``betaincinv`` (agreement ≤ 1e-12 relative), and ``safecert verify``
recomputes each certified bound through SciPy's Beta quantile, an independent route.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from safecert.errors import ConfigError

# log(n!) − log(√(2πn)·(n/e)ⁿ) for n = 0…15, to 17 digits (checked against mpmath in the tests)
_STIRLERR = (
    0.0,
    0.081061466795327258,
    0.041340695955409294,
    0.027677925684998339,
    0.020790672103765093,
    0.016644691189821192,
    0.013876128823070748,
    0.01189670994589177,
    0.010411265261972096,
    0.0092554621827127329,
    0.0083305634333628713,
    0.0075736754879518408,
    0.0069428401072095299,
    0.0064089941880042071,
    0.0059513701127588477,
    0.0055547335519628014,
)
_S0, _S1, _S2, _S3, _S4 = 1 / 12, 1 / 360, 1 / 1260, 1 / 1680, 1 / 1188
_LOG_2PI = math.log(2.0 * math.pi)
_NEGLIGIBLE = 2.0**-60
#: the largest N, and the largest min(k, N − k), a bound is computed for: a tail sum takes about
#: √min(k, N − k) terms (0.23 s at k = 5·10^8 of N = 10^9)
MAX_EPISODES = 10**15
MAX_MINORITY = 10**9


def _stirlerr(n: int) -> float:
    """``log(n!) − log(√(2πn)(n/e)ⁿ)``: a table up to 15, the Stirling series beyond."""
    if n <= 15:
        return _STIRLERR[n]
    nn = float(n) * n
    if n > 500:
        return (_S0 - _S1 / nn) / n
    if n > 80:
        return (_S0 - (_S1 - _S2 / nn) / nn) / n
    if n > 35:
        return (_S0 - (_S1 - (_S2 - _S3 / nn) / nn) / nn) / n
    return (_S0 - (_S1 - (_S2 - (_S3 - _S4 / nn) / nn) / nn) / nn) / n


def _bd0(x: float, m: float) -> float:
    """The deviance ``x·log(x/m) + m − x`` without cancellation when ``x ≈ m`` (Loader 2000)."""
    if abs(x - m) < 0.1 * (x + m):
        v = (x - m) / (x + m)
        s = (x - m) * v
        ej = 2.0 * x * v
        v *= v
        j = 1
        while True:
            ej *= v
            s1 = s + ej / (2 * j + 1)
            if s1 == s:
                return s1
            s = s1
            j += 1
    return x * math.log(x / m) + m - x


def binomial_pmf(x: int, n: int, p: float) -> float:
    """``P(X = x)`` for ``X ~ Binomial(n, p)``, accurate to a few ulp (Loader's saddle point)."""
    q = 1.0 - p
    if p == 0.0:
        return 1.0 if x == 0 else 0.0
    if q == 0.0:
        return 1.0 if x == n else 0.0
    if x == 0:
        return math.exp(n * math.log1p(-p)) if p < 0.1 else math.exp(-_bd0(n, n * q) - n * p)
    if x == n:
        return math.exp(n * math.log(p)) if q >= 0.1 else math.exp(-_bd0(n, n * p) - n * q)
    lc = _stirlerr(n) - _stirlerr(x) - _stirlerr(n - x) - _bd0(x, n * p) - _bd0(n - x, n * q)
    return math.exp(lc - 0.5 * (_LOG_2PI + math.log(x) + math.log1p(-x / n)))


def binomial_tails(k: int, n: int, p: float) -> tuple[float, float]:
    """``(P(X ≤ k), P(X > k))`` for ``X ~ Binomial(n, p)``.

    The tail that does not contain the mode ``⌊(n+1)p⌋`` is summed term by term from ``k``
    outwards (the terms decrease geometrically there) and is accurate in relative terms; the
    other, which then holds at least about a third of the mass, is its complement."""
    if k < 0:
        return 0.0, 1.0
    if k >= n:
        return 1.0, 0.0
    if p <= 0.0:
        return 1.0, 0.0
    if p >= 1.0:
        return 0.0, 1.0
    q = 1.0 - p
    if k < math.floor((n + 1) * p):  # lower tail from k down: ratio j·q / ((n−j+1)·p) < 1
        j, t = k, binomial_pmf(k, n, p)
        total = t
        while j > 0:
            ratio = j * q / ((n - j + 1) * p)
            t *= ratio
            j -= 1
            total += t
            if ratio < 1.0 and t * ratio / (1.0 - ratio) <= total * _NEGLIGIBLE:
                break
        return total, 1.0 - total
    j, t = k + 1, binomial_pmf(k + 1, n, p)  # upper tail from k+1 up: ratio < 1 past the mode
    total = t
    while j < n:
        ratio = (n - j) * p / ((j + 1) * q)
        t *= ratio
        j += 1
        total += t
        if ratio < 1.0 and t * ratio / (1.0 - ratio) <= total * _NEGLIGIBLE:
            break
    return 1.0 - total, total


def _solve(
    log_gap: Callable[[float], tuple[float, float]], increasing: bool, guess: float
) -> float:
    """The root in (0, 1) of a monotone ``log tail(p) − log level``, given with its derivative.

    Newton steps on the log tail, kept inside a bracket that every evaluation narrows; a step
    that leaves the bracket is replaced by its (geometric, for small scales) midpoint."""
    lo, hi, p = 0.0, 1.0, guess
    for _ in range(400):
        value, slope = log_gap(p)
        if value == 0.0:
            return p
        if (value < 0.0) == increasing:
            lo = p
        else:
            hi = p
        step = (
            p - value / slope if math.isfinite(value) and math.isfinite(slope) and slope else -1.0
        )
        if abs(step - p) <= 4.0 * math.ulp(p):
            return step
        if not lo < step < hi:
            step = math.sqrt(lo * hi) if lo > 0.0 and hi > 4.0 * lo else 0.5 * (lo + hi)
            if lo == 0.0:
                step = min(step, hi / 16.0)
            if hi - lo <= 4.0 * math.ulp(hi):
                return step
        p = step
    raise ArithmeticError("the Clopper–Pearson iteration did not converge")  # pragma: no cover


def _upper_value(k: int, n: int, delta: float) -> float:
    """The p with ``P_p(X ≤ k) = δ`` (0 ≤ k < n)."""
    if k == 0:
        return -math.expm1(math.log(delta) / n)
    log_level = math.log(delta)

    def log_gap(p: float) -> tuple[float, float]:
        below, _ = binomial_tails(k, n, p)
        if below <= 0.0:
            return -math.inf, math.nan
        return math.log(below) - log_level, -n * binomial_pmf(k, n - 1, p) / below

    guess = min((k + 1.0 + math.sqrt((k + 1.0) * -2.0 * log_level)) / n, 0.5 * (1.0 + k / n))
    return _solve(log_gap, increasing=False, guess=guess)


def _lower_value(k: int, n: int, delta: float) -> float:
    """The p with ``P_p(X ≥ k) = δ`` (0 < k ≤ n)."""
    if k == n:
        return math.exp(math.log(delta) / n)
    log_level = math.log(delta)

    def log_gap(p: float) -> tuple[float, float]:
        _, above = binomial_tails(k - 1, n, p)
        if above <= 0.0:
            return -math.inf, math.nan
        return math.log(above) - log_level, n * binomial_pmf(k - 1, n - 1, p) / above

    guess = max((k - math.sqrt(k * -2.0 * log_level)) / n, 0.5 * k / n)
    return _solve(log_gap, increasing=True, guess=guess)


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
    """Raise :class:`ConfigError` unless 0 ≤ failures ≤ episodes, 1 ≤ episodes ≤ 10^15 and
    min(failures, episodes − failures) ≤ 10^9 (so that no bound takes more than a second)."""
    if episodes < 1:
        raise ConfigError(f"{episodes} must be at least 1", field="episodes", fix="pass N >= 1")
    if episodes > MAX_EPISODES:
        raise ConfigError(
            f"{episodes} is above the limit of {MAX_EPISODES:.0e}",
            field="episodes",
            fix=f"pass N <= {MAX_EPISODES}",
        )
    if failures < 0:
        raise ConfigError(f"{failures} is negative", field="failures", fix="pass 0 <= K <= N")
    if failures > episodes:
        raise ConfigError(
            f"{failures} exceeds episodes={episodes}", field="failures", fix="pass 0 <= K <= N"
        )
    if min(failures, episodes - failures) > MAX_MINORITY:
        raise ConfigError(
            f"{failures} of {episodes}: both failures and successes exceed {MAX_MINORITY:.0e}",
            field="failures",
            fix="the bound's cost grows with √min(K, N − K); pass fewer episodes",
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
        value = _upper_value(failures, episodes, delta)
    return BinomialBound(failures, episodes, delta, "upper", value)


def cp_lower(failures: int, episodes: int, delta: float) -> BinomialBound:
    """One-sided lower Clopper–Pearson bound: P(p ≥ value) ≥ 1−δ."""
    validate_counts(failures, episodes)
    validate_delta(delta)
    if failures == 0:
        value = 0.0
    else:
        value = _lower_value(failures, episodes, delta)
    return BinomialBound(failures, episodes, delta, "lower", value)


def cp_interval(failures: int, episodes: int, delta: float) -> BinomialInterval:
    """Two-sided Clopper–Pearson interval with coverage ≥ 1−δ (δ/2 per tail)."""
    lo = cp_lower(failures, episodes, delta / 2.0).value
    hi = cp_upper(failures, episodes, delta / 2.0).value
    return BinomialInterval(failures, episodes, delta, lo, hi)
