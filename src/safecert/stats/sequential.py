"""Anytime-valid sequential tests of a failure probability against a threshold p*.

A cell's episodes X_1, X_2, … are i.i.d. Bernoulli(p) (1 = failure), taken in their pre-assigned
index order. After n episodes with k failures a rule may stop with

- **PASS**: an upper confidence bound U_n ≤ p* (the claim "p ≤ p*"),
- **FAIL**: a lower confidence bound L_n > p* (the claim "p > p*"),
- **INCONCLUSIVE**: the cap N_max was reached without either.

Every rule here is a pair of *boundaries*: at check point n_j it passes iff k ≤ pass_max[j] and
fails iff k ≥ fail_min[j]. The one-sided e-process rule ``onesided`` (the default; see
:mod:`safecert.stats.eprocess`) and three constructions:

- ``looks``: pre-declared looks n_1 < … < n_J = N_max with error spending δ_j, Σ δ_j ≤ δ, and
  Clopper–Pearson at δ_j at each look. By the union bound over looks,
  P_p(∃j: p > U_j) ≤ Σ δ_j ≤ δ, so any stopping rule that only stops at looks is valid.
- ``mixture``: Robbins' beta-binomial mixture. For a prior Beta(a, b), the mixture likelihood
  ratio M_n(p0) = B(a+k, b+n−k) / (B(a, b) · p0^k (1−p0)^(n−k)) is a non-negative martingale
  with mean 1 under p = p0, so by Ville's inequality P_p0(∃n: M_n(p0) ≥ 1/δ) ≤ δ. The
  confidence sequence {p0 : M_n(p0) < 1/δ} is an interval [L_n, U_n] (log M_n is convex in p0),
  valid uniformly over all n, hence at any stopping time; it may be checked after every episode.
- ``curtail``: exact curtailment of the fixed-N Clopper–Pearson plan (PASS iff k_N ≤ a*): stop
  as soon as the fixed-N decision is determined (k_n > a* → FAIL; k_n + (N−n) ≤ a* → PASS). It
  takes the same decision as fixed N on every sequence, so its error rates are fixed N's.

**One δ for both claims.** A wrong PASS needs p > p* ≥ U_n, i.e. the upper bound failed; a wrong
FAIL needs p < p* < L_n, the lower bound failed. For any given p only one of the two errors is
possible, so P_p(wrong decision) ≤ δ with each one-sided bound at the full δ (no split). For the
mixture both sides come from one two-sided confidence sequence at level δ, which is stronger.
Over a grid of M cells, Bonferroni (δ/M per cell) bounds the family-wise error whatever order or
time the cells stop in, because each cell's rule only reads that cell's own episodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from scipy.special import betaln

from safecert.errors import ConfigError
from safecert.stats.binomial import cp_lower, cp_upper, validate_delta
from safecert.stats.planning import validate_p_star

if TYPE_CHECKING:
    from safecert.stats.betting import BettingRule

PASS, FAIL, INCONCLUSIVE, UNDECIDED = "PASS", "FAIL", "INCONCLUSIVE", "UNDECIDED"
BOUNDARY_METHODS = ("onesided", "looks", "mixture", "curtail")
SPENDING = ("pi2", "uniform")


@dataclass(frozen=True)
class Boundaries:
    """A sequential rule as decision boundaries at increasing check points.

    At ``checks[j]`` episodes with k failures: PASS iff k ≤ ``pass_max[j]`` (−1: impossible),
    FAIL iff k ≥ ``fail_min[j]`` (``checks[j]+1``: impossible). ``deltas`` holds the per-look
    error spend for ``looks`` (empty otherwise); ``prior`` the Beta(a, b) of ``mixture``.
    """

    method: str
    p_star: float
    delta: float
    checks: np.ndarray
    pass_max: np.ndarray
    fail_min: np.ndarray
    deltas: np.ndarray
    prior: tuple[float, float] | None = None
    fixed_n: int | None = None

    @property
    def cap(self) -> int:
        return int(self.checks[-1])

    def decide(self, outcomes: np.ndarray | list[bool]) -> SequentialDecision:
        return decide(self, outcomes)

    def next_check(self, episodes: int) -> int:
        return next_check(self, episodes)

    def describe(self) -> dict:
        """JSON-friendly summary (what a certificate records about the rule)."""
        out: dict = {
            "method": self.method,
            "p_star": self.p_star,
            "delta": self.delta,
            "cap": self.cap,
            "checks": len(self.checks),
        }
        if self.method == "looks":
            out["looks"] = [int(n) for n in self.checks]
            out["look_deltas"] = [float(d) for d in self.deltas]
        if self.prior is not None:
            out["prior"] = list(self.prior)
        if self.fixed_n is not None:
            out["fixed_n"] = self.fixed_n
        return out


@dataclass(frozen=True)
class SequentialDecision:
    """Outcome of applying a rule to the episodes seen so far (in index order).

    ``episodes`` is the stopping index (how many episodes the decision used); ``lower``/``upper``
    are the rule's confidence bounds at that index (each valid at the rule's δ).
    """

    decision: str
    episodes: int
    failures: int
    check: int | None
    lower: float
    upper: float


def geometric_looks(first: int, cap: int, ratio: float = 1.5) -> np.ndarray:
    """Look schedule first, ⌈first·r⌉, ⌈first·r²⌉, … capped at and ending with ``cap``."""
    if not 1 <= first <= cap:
        raise ConfigError(
            f"first look {first} is not in [1, cap={cap}]", field="first_look", fix="use 1..cap"
        )
    if not ratio > 1.0:
        raise ConfigError(f"{ratio} must be > 1", field="look_ratio", fix="use e.g. 1.5")
    looks = [first]
    while looks[-1] < cap:
        looks.append(min(cap, max(looks[-1] + 1, math.ceil(looks[-1] * ratio))))
    return np.asarray(looks, dtype=np.int64)


def spending(delta: float, looks: int, kind: str = "pi2") -> np.ndarray:
    """Per-look error spend with Σ δ_j ≤ δ.

    ``pi2``: δ_j = δ·6/(π² j²) (sums to < δ for any number of looks, so looks can be appended
    later without breaking validity). ``uniform``: δ_j = δ/J.
    """
    validate_delta(delta)
    j = np.arange(1, looks + 1, dtype=float)
    if kind == "pi2":
        return delta * 6.0 / (math.pi**2 * j**2)
    if kind == "uniform":
        return np.full(looks, delta / looks)
    raise ConfigError(f"{kind!r} is not a spending rule", field="spending", fix="pi2 or uniform")


def _cp_pass_max(n: int, delta: float, p_star: float) -> int:
    """Largest k with cp_upper(k, n, δ) ≤ p* (−1 if none): bisection, upper is increasing in k."""
    if cp_upper(0, n, delta).value > p_star:
        return -1
    lo, hi = 0, n  # ok(lo) holds; find the last k that passes
    if cp_upper(hi, n, delta).value <= p_star:
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if cp_upper(mid, n, delta).value <= p_star:
            lo = mid
        else:
            hi = mid
    return lo


def _cp_fail_min(n: int, delta: float, p_star: float) -> int:
    """Smallest k with cp_lower(k, n, δ) > p* (n+1 if none)."""
    if cp_lower(n, n, delta).value <= p_star:
        return n + 1
    lo, hi = 0, n  # fail(hi) holds, fail(lo = 0) never does
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if cp_lower(mid, n, delta).value > p_star:
            hi = mid
        else:
            lo = mid
    return hi


def cp_boundaries(p_star: float, checks: np.ndarray, deltas: np.ndarray) -> Boundaries:
    """Clopper–Pearson at level ``deltas[j]`` at each check.

    Valid (both error rates ≤ Σ deltas) only when Σ deltas ≤ δ; the caller chooses the spend
    (see :func:`looks_boundaries`). Checking every batch at the full δ each time is the classic
    invalid "peeking" rule.
    """
    validate_p_star(p_star)
    checks = np.asarray(checks, dtype=np.int64)
    deltas = np.asarray(deltas, dtype=float)
    if checks.ndim != 1 or checks.size == 0 or np.any(np.diff(checks) <= 0) or checks[0] < 1:
        raise ConfigError("looks must be increasing and >= 1", field="looks", fix="e.g. 50,100")
    if deltas.shape != checks.shape:
        raise ConfigError("one delta per look is needed", field="deltas", fix="match the looks")
    pass_max = np.array(
        [_cp_pass_max(int(n), float(d), p_star) for n, d in zip(checks, deltas, strict=True)]
    )
    fail_min = np.array(
        [_cp_fail_min(int(n), float(d), p_star) for n, d in zip(checks, deltas, strict=True)]
    )
    return Boundaries("looks", p_star, float(deltas.sum()), checks, pass_max, fail_min, deltas)


def looks_boundaries(
    p_star: float,
    delta: float,
    cap: int,
    *,
    first: int | None = None,
    ratio: float = 1.5,
    kind: str = "pi2",
) -> Boundaries:
    """Geometric looks with error spending. Default first look: the smallest n at which zero
    failures already PASS at the first look's δ_1 (earlier looks could never pass)."""
    validate_p_star(p_star)
    validate_delta(delta)
    if cap < 1:
        raise ConfigError(f"{cap} must be >= 1", field="cap", fix="use cap >= 1")
    if first is None:
        d1 = float(spending(delta, 1, kind)[0]) if kind == "pi2" else None
        if d1 is None:  # uniform spend depends on the number of looks: iterate to a fixed point
            first = cap
            for _ in range(20):
                j = len(geometric_looks(min(first, cap), cap, ratio))
                new = min(cap, math.ceil(math.log(delta / j) / math.log1p(-p_star)))
                if new == first:
                    break
                first = new
        else:
            first = min(cap, math.ceil(math.log(d1) / math.log1p(-p_star)))
    checks = geometric_looks(first, cap, ratio)
    return cp_boundaries(p_star, checks, spending(delta, len(checks), kind))


def mixture_log_evalue(
    failures: np.ndarray | int, episodes: np.ndarray | int, p0: float, prior: tuple[float, float]
) -> np.ndarray:
    """log M_n(p0) = log B(a+k, b+n−k) − log B(a, b) − k log p0 − (n−k) log(1−p0)."""
    a, b = prior
    k = np.asarray(failures, dtype=float)
    n = np.asarray(episodes, dtype=float)
    return betaln(a + k, b + n - k) - betaln(a, b) - k * math.log(p0) - (n - k) * math.log1p(-p0)


def default_prior(p_star: float) -> tuple[float, float]:
    """Beta(1/2, (1−p*)/(2p*)): prior mean p*, Jeffreys-like shape near 0 (a design choice)."""
    return (0.5, 0.5 * (1.0 - p_star) / p_star)


def mixture_boundaries(
    p_star: float, delta: float, cap: int, prior: tuple[float, float] | None = None
) -> Boundaries:
    """Beta-binomial mixture boundaries checked after every episode n = 1 … cap.

    log M_n(p*) is convex in k, so {k : M_n(p*) ≥ 1/δ} is k ≤ pass_max or k ≥ fail_min; the
    side is set by k/n < p* (then the whole interval [L_n, U_n] lies below p*) or k/n > p*.
    """
    validate_p_star(p_star)
    validate_delta(delta)
    prior = default_prior(p_star) if prior is None else prior
    if not (prior[0] > 0 and prior[1] > 0):
        raise ConfigError(f"prior {prior} needs a, b > 0", field="prior", fix="e.g. [0.5, 9.5]")
    if cap < 1:
        raise ConfigError(f"{cap} must be >= 1", field="cap", fix="use cap >= 1")
    n = np.arange(1, cap + 1, dtype=np.int64)
    level = math.log(1.0 / delta)

    def hit(k: np.ndarray) -> np.ndarray:
        return mixture_log_evalue(k, n, p_star, prior) >= level

    # PASS side: k < n p*; FAIL side: k > n p*. log M_n(p*) is convex in k, so on each side the
    # hits form a prefix (resp. suffix) unless the side's inner end is a hit while the e-value
    # already turns there. That has not been seen for any Beta prior (the tests compare with
    # brute force over many priors); the guard keeps the boundaries exact if it ever happened.
    top = np.ceil(n * p_star).astype(np.int64) - 1
    bottom = np.floor(n * p_star).astype(np.int64) + 1

    def logm(k: np.ndarray) -> np.ndarray:
        return mixture_log_evalue(np.clip(k, 0, n), n, p_star, prior)

    bad_pass = (top >= 1) & (logm(top) > logm(top - 1)) & hit(np.maximum(top, 0))
    bad_fail = (bottom + 1 <= n) & (logm(bottom) > logm(bottom + 1)) & hit(np.minimum(bottom, n))
    if np.any(bad_pass) or np.any(bad_fail):
        raise ConfigError(
            f"prior {prior} is too far from p*={p_star} for monotone boundaries",
            field="prior",
            fix="use a prior with mean near p*, e.g. the default",
        )
    pass_max = bisect_last(hit, np.full(cap, -1, dtype=np.int64), top + 1)
    fail_min = bisect_first(hit, bottom - 1, n + 1, n)
    return Boundaries(
        "mixture",
        p_star,
        delta,
        n,
        pass_max,
        fail_min,
        np.empty(0),
        prior=(float(prior[0]), float(prior[1])),
    )


def bisect_last(hit, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Vectorised: the last k in (lo, hi) with hit(k), given hit(lo) (or lo = −1) and ¬hit(hi)."""
    while True:
        active = hi - lo > 1
        if not active.any():
            return lo
        mid = (lo + hi) // 2
        ok = hit(np.maximum(mid, 0))
        lo = np.where(active & ok, mid, lo)
        hi = np.where(active & ~ok, mid, hi)


def bisect_first(hit, lo: np.ndarray, hi: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Vectorised: the first k in (lo, hi) with hit(k), given ¬hit(lo) and hit(hi) (hi = n+1: none)."""
    while True:
        active = hi - lo > 1
        if not active.any():
            return hi
        mid = (lo + hi) // 2
        ok = hit(np.minimum(mid, n))
        hi = np.where(active & ok, mid, hi)
        lo = np.where(active & ~ok, mid, lo)


def mixture_bounds(
    failures: int, episodes: int, delta: float, prior: tuple[float, float]
) -> tuple[float, float]:
    """The confidence-sequence interval [L_n, U_n] = {p0 : M_n(p0) < 1/δ} (root finding)."""
    from scipy.optimize import brentq  # lazy: keeps `safecert --help` fast

    level = math.log(1.0 / delta)
    k, n = failures, episodes
    mle = k / n

    def g(p0: float) -> float:
        return float(mixture_log_evalue(k, n, p0, prior)) - level

    eps = 1e-15
    upper = 1.0 if k == n or g(1.0 - eps) < 0 else brentq(g, max(mle, eps), 1.0 - eps, xtol=1e-14)
    lower = 0.0 if k == 0 or g(eps) < 0 else brentq(g, eps, min(mle, 1.0 - eps), xtol=1e-14)
    return float(lower), float(upper)


def fixed_n_pass_max(n_fixed: int, p_star: float, delta: float) -> int:
    """a* = the largest failure count at which the fixed-N plan passes (−1: it cannot pass)."""
    return _cp_pass_max(n_fixed, delta, p_star)


def curtailed_boundaries(p_star: float, delta: float, n_fixed: int) -> Boundaries:
    """Exact curtailment of the fixed-N rule PASS iff k_N ≤ a* (else FAIL)."""
    validate_p_star(p_star)
    validate_delta(delta)
    a_star = fixed_n_pass_max(n_fixed, p_star, delta)
    n = np.arange(1, n_fixed + 1, dtype=np.int64)
    pass_max = a_star - (n_fixed - n)
    pass_max = np.where(pass_max >= 0, pass_max, -1)
    fail_min = np.minimum(np.full(n_fixed, a_star + 1, dtype=np.int64), n + 1)
    # At n = N the rule is always decided: FAIL for every k > a*.
    return Boundaries("curtail", p_star, delta, n, pass_max, fail_min, np.empty(0), fixed_n=n_fixed)


def bounds_at(b: Boundaries, j: int, failures: int) -> tuple[float, float]:
    """The rule's (lower, upper) confidence bounds after ``checks[j]`` episodes.

    looks: Clopper–Pearson at δ_j. mixture: the confidence-sequence interval. onesided: the
    inverted one-sided e-process tests. curtail: the
    fixed-N bounds of the most extreme completions (cp_lower(k_n, N), cp_upper(k_n + N − n, N)),
    which bracket the fixed-N bounds of the real completion and so keep their validity.
    """
    n = int(b.checks[j])
    if b.method == "looks":
        d = float(b.deltas[j])
        return cp_lower(failures, n, d).value, cp_upper(failures, n, d).value
    if b.method == "mixture":
        assert b.prior is not None
        return mixture_bounds(failures, n, b.delta, b.prior)
    if b.method == "onesided":
        from safecert.stats.eprocess import onesided_bounds

        return onesided_bounds(failures, n, b.delta)
    assert b.fixed_n is not None
    worst = failures + (b.fixed_n - n)
    return cp_lower(failures, b.fixed_n, b.delta).value, cp_upper(worst, b.fixed_n, b.delta).value


def decide(b: Boundaries, outcomes: np.ndarray | list[bool]) -> SequentialDecision:
    """Apply the rule to the outcomes seen so far (1 = failure), in episode-index order.

    Stops at the first check point where a boundary is crossed; outcomes after it are ignored.
    Fewer than ``cap`` outcomes and no crossing → UNDECIDED (schedule up to
    :func:`next_check`); ``cap`` reached without a crossing → INCONCLUSIVE.
    """
    x = np.asarray(outcomes, dtype=np.int64)
    if x.ndim != 1 or np.any((x != 0) & (x != 1)):
        raise ConfigError("outcomes must be a 0/1 vector", field="outcomes", fix="pass failures")
    cum = np.concatenate([[0], np.cumsum(x)])
    usable = b.checks <= x.size
    ks = cum[b.checks[usable]]
    crossed = np.flatnonzero((ks <= b.pass_max[usable]) | (ks >= b.fail_min[usable]))
    if crossed.size:
        j = int(crossed[0])
        k = int(ks[j])
        verdict = PASS if k <= b.pass_max[j] else FAIL
    else:
        j = int(np.count_nonzero(usable)) - 1
        k = int(ks[j]) if j >= 0 else 0
        verdict = INCONCLUSIVE if x.size >= b.cap else UNDECIDED
    if j < 0:
        return SequentialDecision(UNDECIDED, 0, 0, None, 0.0, 1.0)
    lower, upper = bounds_at(b, j, k)
    return SequentialDecision(verdict, int(b.checks[j]), k, j, lower, upper)


def stopping_index(rule: Boundaries | BettingRule, outcomes: np.ndarray) -> int | None:
    """The episode count at which ``rule`` stops on ``outcomes`` (1 = failure, index order): the
    first check where a boundary is crossed, or the cap; None while it has not stopped.

    Equal to ``rule.decide(outcomes).episodes`` whenever that decision is not UNDECIDED, without
    computing the bounds, so a scheduler may call it after every episode."""
    x = np.asarray(outcomes, dtype=np.int64)
    if not isinstance(rule, Boundaries):
        if x.size == 0:
            return None
        code, used = rule.stopping(x)
        return int(used[0]) if code[0] != 0 or x.size >= rule.cap else None
    cum = np.concatenate([[0], np.cumsum(x)])
    usable = rule.checks <= x.size
    ks = cum[rule.checks[usable]]
    crossed = np.flatnonzero((ks <= rule.pass_max[usable]) | (ks >= rule.fail_min[usable]))
    if crossed.size:
        return int(rule.checks[crossed[0]])
    return rule.cap if x.size >= rule.cap else None


def next_check(b: Boundaries, episodes: int) -> int:
    """The first check point strictly after ``episodes`` (the cap if none is left)."""
    idx = int(np.searchsorted(b.checks, episodes, side="right"))
    return int(b.checks[min(idx, len(b.checks) - 1)])
