"""One-sided anytime-valid tests of "p ≤ p*" by e-processes (the ``onesided`` sequential rule).

The question a cell answers is one-sided, so instead of inverting a two-sided confidence sequence
we run two one-sided tests on the same i.i.d. Bernoulli(p) outcomes (1 = failure), after every
episode, and stop at whichever fires first:

- **PASS test** (evidence that p < p0): the mixture likelihood ratio

      E⁺_n(p0) = ∫₀^{p0} ∏ᵢ (q/p0)^{Xᵢ} ((1−q)/(1−p0))^{1−Xᵢ} π⁺(dq),

  with π⁺ = Beta(1/2, 1) truncated to [0, p0] (density ∝ q^{−1/2}). For each q < p0 one factor
  has mean p·q/p0 + (1−p)(1−q)/(1−p0) ≤ 1 whenever p ≥ p0 (it equals 1 at p = p0 and decreases
  in p), so E⁺ is a non-negative supermartingale under every p ≥ p0 and, by Ville's inequality,
  P_p(∃n: E⁺_n(p0) ≥ 1/δ) ≤ δ. PASS when E⁺_n(p*) ≥ 1/δ.
- **FAIL test** (evidence that p > p0): the mirror image with π⁻ = Beta(1, 1/(2·p0)) truncated
  to [p0, 1]; a supermartingale under every p ≤ p0. FAIL when E⁻_n(p*) ≥ 1/δ.

**Error.** A wrong PASS needs p > p* and E⁺ crossing; a wrong FAIL needs p ≤ p* and E⁻ crossing.
For any true p only one of the two is possible, so each test may use the full per-cell δ' (no
split) and P_p(wrong decision) ≤ δ' at any stopping time; Bonferroni over cells as for every rule.
(Checked exactly by dynamic programming in the tests and the benchmark.)

**Why these mixtures.** Closed forms through the regularised incomplete Beta function, and power
where certification needs it: π⁺'s mass near 0 makes a failure-free cell pass after about
ln(2/δ)/−ln(1−p*) episodes (59 at p* = 0.05, δ = 0.1; fixed N needs 45), while its spread up to p*
keeps power at rates well inside (median 155 episodes at p = 0.02, where the smallest fixed N
with 90 % power is 258). π⁻ has mean ≈ 3p* for small p*, giving power at rates 2–4× p*.

**Bounds.** The rule reports the anytime-valid one-sided bounds obtained by inverting the same
family of tests: U_n = the smallest p0 above k/n at which E⁺_n(p0) ≥ 1/δ (E⁺_n(p0) increases in
p0 there, checked in the tests), and L_n likewise from E⁻; PASS ⇔ U_n ≤ p*, FAIL ⇔ L_n > p*.
Numerically, e-values are computed in log space; an underflow can only make them smaller, which
delays a decision and never makes one wrong.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import betainc, betaln

from safecert.errors import ConfigError
from safecert.stats.binomial import validate_delta
from safecert.stats.planning import validate_p_star

PASS_PRIOR_A = 0.5  # π⁺ = Beta(1/2, 1) on [0, p0]


def fail_prior_b(p0: float) -> float:
    """π⁻ = Beta(1, b) on [p0, 1] with b = 1/(2 p0)."""
    return 0.5 / p0


def _log(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(x)


def pass_log_evalue(failures, episodes, p0: float) -> np.ndarray:
    """log E⁺_n(p0) (module docstring), vectorised over ``failures``/``episodes``."""
    k = np.asarray(failures, dtype=float)
    n = np.asarray(episodes, dtype=float)
    a = PASS_PRIOR_A
    # ∫₀^{p0} q^{k+a−1} (1−q)^{n−k} dq = B(k+a, n−k+1) · I_{p0}(k+a, n−k+1); prior mass 2√p0
    numerator = betaln(k + a, n - k + 1.0) + _log(betainc(k + a, n - k + 1.0, p0))
    prior_mass = math.log(p0**a / a)
    return numerator - prior_mass - k * math.log(p0) - (n - k) * math.log1p(-p0)


def fail_log_evalue(failures, episodes, p0: float) -> np.ndarray:
    """log E⁻_n(p0) (module docstring), vectorised over ``failures``/``episodes``."""
    k = np.asarray(failures, dtype=float)
    n = np.asarray(episodes, dtype=float)
    b = fail_prior_b(p0)
    # ∫_{p0}^1 q^k (1−q)^{n−k+b−1} dq = B(k+1, n−k+b) · I_{1−p0}(n−k+b, k+1); prior mass (1−p0)^b/b
    numerator = betaln(k + 1.0, n - k + b) + _log(betainc(n - k + b, k + 1.0, 1.0 - p0))
    prior_mass = b * math.log1p(-p0) - math.log(b)
    return numerator - prior_mass - k * math.log(p0) - (n - k) * math.log1p(-p0)


def onesided_boundaries(p_star: float, delta: float, cap: int):
    """Decision boundaries after every episode n = 1 … cap: PASS iff k ≤ pass_max[n],
    FAIL iff k ≥ fail_min[n]. E⁺ decreases and E⁻ increases in k (each factor does), so each
    region is exactly a prefix / suffix of k."""
    from safecert.stats.sequential import Boundaries, bisect_first, bisect_last

    validate_p_star(p_star)
    validate_delta(delta)
    if cap < 1:
        raise ConfigError(f"{cap} must be >= 1", field="cap", fix="use cap >= 1")
    n = np.arange(1, cap + 1, dtype=np.int64)
    level = math.log(1.0 / delta)

    def passes(k: np.ndarray) -> np.ndarray:
        return pass_log_evalue(k, n, p_star) >= level

    def fails(k: np.ndarray) -> np.ndarray:
        return fail_log_evalue(k, n, p_star) >= level

    # PASS needs k/n < p*; FAIL needs k/n > p* (beyond that each e-value is below 1)
    top = np.ceil(n * p_star).astype(np.int64)
    pass_max = bisect_last(passes, np.full(cap, -1, dtype=np.int64), top)
    fail_min = bisect_first(fails, np.floor(n * p_star).astype(np.int64), n + 1, n)
    return Boundaries("onesided", p_star, delta, n, pass_max, fail_min, np.empty(0))


def onesided_bounds(failures: int, episodes: int, delta: float) -> tuple[float, float]:
    """(L_n, U_n): the anytime-valid one-sided bounds of the same tests (module docstring)."""
    from scipy.optimize import brentq  # lazy: keeps the CLI's start-up fast

    k, n = failures, episodes
    level = math.log(1.0 / delta)
    mle = k / n
    eps = 1e-12

    def g_up(p0: float) -> float:
        return float(pass_log_evalue(k, n, p0)) - level

    def g_low(p0: float) -> float:
        return float(fail_log_evalue(k, n, p0)) - level

    hi = 1.0 - eps
    upper = 1.0 if k == n or g_up(hi) < 0 else brentq(g_up, max(mle, eps), hi, xtol=1e-14)
    lower = 0.0 if k == 0 or g_low(eps) < 0 else brentq(g_low, eps, min(mle, hi), xtol=1e-14)
    return float(lower), float(upper)
