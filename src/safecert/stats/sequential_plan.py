"""Sequential rules by name, their exact operating characteristics, and method planning.

:func:`make_rule` builds the rule a config names (one place for every caller: certification,
verification, the planner, the benchmarks). :func:`operating_characteristics` computes the exact
probability of each decision and the distribution of the stopping time at a true p by dynamic
programming over the failure count (no simulation). :func:`compare_methods` answers "how many
episodes will each method need" for the planner.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import beta, binom

from safecert.errors import ConfigError
from safecert.stats.betting import BettingRule
from safecert.stats.eprocess import onesided_boundaries
from safecert.stats.planning import zero_failure_episodes
from safecert.stats.sequential import (
    Boundaries,
    curtailed_boundaries,
    fixed_n_pass_max,
    looks_boundaries,
    mixture_boundaries,
)

RULES = ("onesided", "mixture", "looks", "betting", "curtail")
PLAN_METHODS = (
    "cp",
    "hoeffding",
    "sequential",
    "onesided",
    "looks",
    "mixture",
    "betting",
    "curtail",
)
#: the rule ``--sequential`` uses unless the config names another
DEFAULT_RULE = "onesided"


def make_rule(
    method: str, p_star: float, delta: float, cap: int, options: dict[str, Any] | None = None
) -> Boundaries | BettingRule:
    """The named rule at per-cell level δ with cap episodes.

    Options: ``looks`` → ``first_look``, ``look_ratio``, ``spending``; ``mixture`` → ``prior``
    ([a, b]). Unknown options are an error naming the key.
    """
    opts = dict(options or {})
    allowed = {"looks": {"first_look", "look_ratio", "spending"}, "mixture": {"prior"}}
    extra = set(opts) - allowed.get(method, set())
    if extra:
        key = sorted(extra)[0]
        raise ConfigError(
            f"{key!r} is not an option of method {method!r}", field=f"sequential.{key}"
        )
    if method == "looks":
        return looks_boundaries(
            p_star,
            delta,
            cap,
            first=opts.get("first_look"),
            ratio=float(opts.get("look_ratio", 1.5)),
            kind=str(opts.get("spending", "pi2")),
        )
    if method == "mixture":
        prior = opts.get("prior")
        return mixture_boundaries(p_star, delta, cap, None if prior is None else tuple(prior))
    if method == "onesided":
        return onesided_boundaries(p_star, delta, cap)
    if method == "betting":
        return BettingRule(p_star, delta, cap)
    if method == "curtail":
        return curtailed_boundaries(p_star, delta, cap)
    raise ConfigError(
        f"{method!r} is not a sequential method", field="sequential.method", fix=", ".join(RULES)
    )


@dataclass(frozen=True)
class OperatingCharacteristics:
    """Exact probabilities of each decision and the stopping-time distribution at a true p."""

    p: float
    pass_prob: float
    fail_prob: float
    inconclusive_prob: float
    expected_episodes: float
    median_episodes: int
    quantile90_episodes: int


def operating_characteristics(b: Boundaries, p: float) -> OperatingCharacteristics:
    """Exact dynamic programme over the failure count.

    The distribution of k is propagated between check points by binomial convolution; mass that
    crosses a boundary is absorbed as PASS/FAIL at that check. Counts above max(fail_min) are
    always absorbed as FAIL, so the state is truncated there.
    """
    if not 0.0 <= p <= 1.0:
        raise ConfigError(f"{p} is outside [0, 1]", field="p", fix="use 0 <= p <= 1")
    size = int(min(b.cap, max(int(b.fail_min.max()), 1))) + 1
    ks = np.arange(size + 1)
    dist = np.zeros(size + 1)
    dist[0] = 1.0
    prev = 0
    p_pass = p_fail = 0.0
    stop_mass = np.zeros(len(b.checks))
    for j, n in enumerate(b.checks):
        step = int(n) - prev
        prev = int(n)
        pmf = binom.pmf(np.arange(min(step, size) + 1), step, p)
        dist = np.convolve(dist, pmf)[: size + 1]
        lost = max(0.0, 1.0 - p_pass - p_fail - float(dist.sum()))  # overflow: k > size ⇒ FAIL
        passed = ks <= b.pass_max[j]
        failed = ks >= b.fail_min[j]
        mp, mf = float(dist[passed].sum()), float(dist[failed].sum()) + lost
        p_pass, p_fail = p_pass + mp, p_fail + mf
        stop_mass[j] = mp + mf
        dist[passed | failed] = 0.0
    rest = max(0.0, 1.0 - p_pass - p_fail)
    stop_mass[-1] += rest
    ns = b.checks.astype(float)
    cdf = np.cumsum(stop_mass)
    median = int(ns[min(int(np.searchsorted(cdf, 0.5)), len(ns) - 1)])
    q90 = int(ns[min(int(np.searchsorted(cdf, 0.9)), len(ns) - 1)])
    return OperatingCharacteristics(p, p_pass, p_fail, rest, float(ns @ stop_mass), median, q90)


@dataclass(frozen=True)
class MethodPlan:
    """Episodes one method needs at an expected failure rate.

    ``kind`` "fixed": ``episodes`` is the N to run (None: the rate can never pass).
    ``kind`` "sequential": ``episodes`` is the expected number used (with median, 90 % quantile).
    ``pass_prob`` is the probability of PASS at the expected rate; ``how`` says how it was computed.
    """

    method: str
    kind: str
    episodes: float | None
    median: int | None
    quantile90: int | None
    pass_prob: float | None
    how: str


def cp_fixed_episodes(p_star: float, delta: float, rate: float, limit: int = 10**8) -> int | None:
    """Smallest N with cp_upper(⌈rate·N⌉, N, δ) ≤ p* (None when rate ≥ p* or beyond ``limit``)."""
    if rate >= p_star:
        return None
    lo = zero_failure_episodes(p_star, delta)
    width = 4096
    while lo < limit:
        n = np.arange(lo, lo + width)
        k = np.ceil(rate * n - 1e-9)
        ok = (k < n) & (beta.ppf(1.0 - delta, k + 1, n - k) <= p_star)
        if ok.any():
            return int(n[int(np.argmax(ok))])
        lo, width = lo + width, width * 2
    return None


def compare_methods(
    methods: list[str],
    p_star: float,
    delta: float,
    rate: float,
    cap: int,
    *,
    simulations: int = 2000,
    seed: int = 0,
) -> list[MethodPlan]:
    """One :class:`MethodPlan` per method at per-cell level δ and true failure rate ``rate``.

    cp and hoeffding are fixed-N plans (closed form / exact search); onesided, looks, mixture and curtail
    (the fixed-N cap curtailed) are exact by :func:`operating_characteristics`; betting is
    path-dependent, so it is simulated (``simulations`` runs, ``seed``). "sequential" is the
    default sequential method (onesided).
    """
    if not 0.0 <= rate < 1.0:
        raise ConfigError(f"{rate} is outside [0, 1)", field="expected_rate", fix="e.g. 0.01")
    out: list[MethodPlan] = []
    for method in methods:
        if method == "cp":
            n = cp_fixed_episodes(p_star, delta, rate)
            prob = (
                None if n is None else float(binom.cdf(fixed_n_pass_max(n, p_star, delta), n, rate))
            )
            out.append(MethodPlan("cp", "fixed", n, None, None, prob, "exact search"))
        elif method == "hoeffding":
            if rate >= p_star:
                out.append(MethodPlan("hoeffding", "fixed", None, None, None, None, "closed form"))
                continue
            n = math.ceil(math.log(1.0 / delta) / (2.0 * (p_star - rate) ** 2))
            radius = math.sqrt(math.log(1.0 / delta) / (2.0 * n))
            kmax = math.floor(n * (p_star - radius) + 1e-9)
            prob = float(binom.cdf(kmax, n, rate)) if kmax >= 0 else 0.0
            out.append(MethodPlan("hoeffding", "fixed", n, None, None, prob, "closed form"))
        elif method in ("sequential", "onesided", "looks", "mixture", "curtail"):
            name = DEFAULT_RULE if method == "sequential" else method
            rule = make_rule(name, p_star, delta, cap)
            assert isinstance(rule, Boundaries)
            oc = operating_characteristics(rule, rate)
            out.append(
                MethodPlan(
                    method,
                    "sequential",
                    oc.expected_episodes,
                    oc.median_episodes,
                    oc.quantile90_episodes,
                    oc.pass_prob,
                    f"exact DP, cap {cap}",
                )
            )
        elif method == "betting":
            rule = BettingRule(p_star, delta, cap)
            rng = np.random.default_rng(seed)
            codes, used = [], []
            for start in range(0, simulations, 500):
                rows = min(500, simulations - start)
                c, u = rule.stopping((rng.random((rows, cap)) < rate).astype(np.int8))
                codes.append(c)
                used.append(u)
            code, n_used = np.concatenate(codes), np.concatenate(used)
            out.append(
                MethodPlan(
                    "betting",
                    "sequential",
                    float(n_used.mean()),
                    int(np.median(n_used)),
                    int(np.quantile(n_used, 0.9)),
                    float(np.mean(code == 1)),
                    f"simulated ({simulations} runs), cap {cap}",
                )
            )
        else:
            raise ConfigError(
                f"{method!r} is not a method", field="method", fix=", ".join(PLAN_METHODS)
            )
    return out
