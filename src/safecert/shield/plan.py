"""A visit planner: which rows to log more, and how much, for V̄_T(s0) ≤ ε (issue 23, item 3).

:func:`plan_visits` answers "what should I collect next?" for a shield D and a budget ε. Per
stochastic row (s, a) it reports the visits ``have`` and the additional visits ``need`` such that,
if every row reached ``have + need`` visits *with today's empirical frequencies* (a row never
visited: uniform over K(s,a)), the certificate would be ``bound_if_met`` ≤ ε. The projection is
exact, not an estimate of an estimate: :func:`projected_estimates` builds the integer counts a log
with those visits at those frequencies has (largest-remainder rounding), and ``bound_if_met`` is
robust value iteration on them — what ``shield certify`` prints on such a log.

Rows that cannot change V̄_T(s0) get ``need`` 0: halt and deterministic rows, rows D forbids,
states not reachable from s0 within T − 1 steps under D (:func:`~safecert.shield.synthesis.
reachable`), and every row whose extra visits turn out not to be needed (a pruning pass).

Anytime sets (``--anytime`` or the model's ``anytime``): every relevant row is raised to a common
target N (the least N, by doubling and bisection; V̄ is monotone in N up to the rounding of the
projected counts, and the final N is re-checked), then rows are given back their ``need`` 0
one by one, largest need first, while the bound stays ≤ ε. Committed-budget sets: extra visits beyond
n0 are discarded, so a vacuous relevant row needs n0 − visits and no row can need more; when even
that leaves V̄ > ε, ``achievable`` is false (raise the budget or use anytime sets).

Assumption: the plan is a projection. Fresh samples follow the true kernel, not today's
frequencies, so the certificate after following the plan may land slightly above or below
``bound_if_met``; re-plan on the grown logs (tests/shield/test_plan.py follows a plan with fresh
samples from a known model until ε is met).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from safecert.errors import ConfigError
from safecert.shield.estimate import RowEstimates
from safecert.shield.model import ShieldModel
from safecert.shield.reach import robust_rows, value_iteration
from safecert.shield.synthesis import reachable

#: the largest common target the anytime search tries (beyond it, ε is out of reach for D)
MAX_VISITS = 10**12


@dataclass(frozen=True)
class PlanRow:
    """One stochastic live row: visits ``have``, additional visits ``need``, and whether the
    projection used its empirical frequencies or (never visited) uniform ones."""

    state: object  # as written in the logs: a label, or {predicate: bool}
    action: str
    have: int
    need: int
    frequencies: str  # "empirical" | "uniform"


@dataclass(frozen=True)
class VisitPlan:
    """The plan (module docstring). ``achievable``: ``bound_if_met`` ≤ ε; when false under anytime
    sets, ``need`` is 0 everywhere and ``bound_limit`` is V̄ with every relevant row at
    :data:`MAX_VISITS` visits (the shield cannot reach ε at these frequencies)."""

    epsilon: float
    bound_now: float
    bound_if_met: float
    achievable: bool
    confidence: str
    bound_limit: float
    rows: list[PlanRow]

    def to_json(self) -> dict[str, object]:
        """``{"epsilon", "bound_now", "bound_if_met", "rows": [{"state", "action", "have",
        "need", "frequencies"}], "achievable", "confidence", "bound_limit"}``."""
        return {
            "epsilon": self.epsilon,
            "bound_now": self.bound_now,
            "bound_if_met": self.bound_if_met,
            "achievable": self.achievable,
            "confidence": self.confidence,
            "bound_limit": self.bound_limit,
            "rows": [
                {
                    "state": r.state,
                    "action": r.action,
                    "have": r.have,
                    "need": r.need,
                    "frequencies": r.frequencies,
                }
                for r in self.rows
            ],
        }


def allocate(p: np.ndarray, total: np.ndarray) -> np.ndarray:
    """Integer counts with row sums ``total`` closest to ``p * total`` (largest remainders; ties
    to the lower index). ``p``: (R, k) rows summing to 1; ``total``: (R,)."""
    total = np.asarray(total, dtype=np.int64)
    exact = p * total[:, None]
    counts = np.floor(exact).astype(np.int64)
    short = total - counts.sum(axis=1)
    order = np.argsort(-(exact - counts), axis=1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(p.shape[1])[None, :], axis=1)
    return counts + (rank < short[:, None])


def projected_estimates(model: ShieldModel, est: RowEstimates, target: np.ndarray) -> RowEstimates:
    """``est`` with each row (s, a) where ``target > visits`` grown to ``target`` visits at its
    empirical frequencies (never visited: uniform over K(s,a)), counts rounded to integers by
    :func:`allocate`. Committed sets keep their budgets n0 (and ``target`` should not pass them);
    anytime sets use every visit."""
    grow = (np.asarray(target) > est.visits) & (est.k >= 2)
    if not grow.any():
        return est
    s, a = np.nonzero(grow)
    k = est.k[s, a]
    width = est.counts.shape[-1]
    seen = est.counts[s, a].astype(np.float64)
    uniform = (np.arange(width)[None, :] < k[:, None]) / k[:, None]
    have = seen.sum(axis=1, keepdims=True)
    p = np.where(have > 0, seen / np.maximum(have, 1.0), uniform)
    counts = est.counts.copy()
    visits = est.visits.copy()
    counts[s, a] = allocate(p, target[s, a])
    visits[s, a] = target[s, a]
    n0 = np.where(est.k >= 2, visits, 0) if est.anytime else est.n0
    return replace(est, counts=counts, visits=visits, n0=n0)


def plan_visits(
    model: ShieldModel, est: RowEstimates, allowed: np.ndarray, epsilon: float
) -> VisitPlan:
    """Additional visits per row for V̄_T(s0; ``allowed``) ≤ ``epsilon`` (module docstring).

    ``allowed`` is a complete shield (:func:`safecert.shield.certify.complete_shield`).

    Example (one risky step, 2 of 10 logged tries went bad; the true risk is unknown):
        >>> from safecert.shield.model import model_from_dict
        >>> from safecert.shield.estimate import RowCounter
        >>> m = model_from_dict({"states": ["s", "ok", "bad"], "actions": ["go", "halt"],
        ...     "initial": "s", "unsafe": ["bad"], "horizon": 2, "delta": 0.1, "anytime": True,
        ...     "successors": {"go": {"s": ["ok", "bad"], "ok": ["ok"]}}})
        >>> c = RowCounter(m, anytime=True)
        >>> c.add(np.zeros(10, np.int64), np.tile([0, 0, 0, 1, 0], 2))   # 8 ok, 2 bad
        >>> p = plan_visits(m, c.result(10), np.ones(m.k.shape, bool), 0.3)
        >>> (p.rows[0].have, p.rows[0].need > 0, p.bound_if_met <= 0.3 < p.bound_now)
        (10, True, True)
    """
    if not 0 <= epsilon <= 1:
        raise ConfigError(f"must be in [0, 1], got {epsilon}", field="epsilon")
    allowed = np.asarray(allowed, dtype=bool)

    def bound(target: np.ndarray) -> float:
        rows = robust_rows(model, projected_estimates(model, est, target))
        values, _ = value_iteration(rows, allowed, model.horizon)
        return float(values[model.initial])

    rows_now = robust_rows(model, est)
    reach = reachable(model, rows_now, allowed)
    relevant = (est.k >= 2) & allowed & (model.live & reach & ~model.unsafe)[:, None]
    relevant[:, model.halt] = False
    now = bound(est.visits)
    target = est.visits.copy()
    limit = now
    if now > epsilon:
        if est.anytime:
            target, limit = _common_target(est, relevant, epsilon, bound)
        else:
            target = np.where(relevant & est.vacuous, est.n0, est.visits)
            limit = bound(target)
        if limit <= epsilon:
            target = _prune(est, target, epsilon, bound)
        elif est.anytime:
            target = est.visits.copy()
    if_met = bound(target)
    table = [
        PlanRow(
            state=model.state_repr(int(s)),
            action=model.actions[a],
            have=int(est.visits[s, a]),
            need=int(target[s, a] - est.visits[s, a]),
            frequencies="empirical" if est.visits[s, a] > 0 else "uniform",
        )
        for s, a in np.argwhere((model.k >= 2) & model.live[:, None])
    ]
    return VisitPlan(
        epsilon=epsilon,
        bound_now=now,
        bound_if_met=if_met,
        achievable=if_met <= epsilon,
        confidence="anytime" if est.anytime else "committed",
        bound_limit=limit,
        rows=table,
    )


def plan_shield(
    model_path: Path,
    logs_path: Path | None,
    epsilon: float,
    *,
    shield_path: Path | None = None,
    anytime: bool = False,
    counts: list[Path] | None = None,
) -> VisitPlan:
    """:func:`plan_visits` for the model, the logs (or count tables) and a shield file (default:
    the full shield), read as ``shield certify`` reads them. Writes nothing."""
    from safecert.shield.certify import complete_shield, load_inputs, read_shield
    from safecert.shield.reach import full_shield
    from safecert.shield.report import allowed_from_json

    if not 0 <= epsilon <= 1:
        raise ConfigError(f"must be in [0, 1], got {epsilon}", field="epsilon")
    model, est = load_inputs(model_path, logs_path, anytime=anytime, counts=counts)
    if shield_path is None:
        allowed = full_shield(model)
    else:
        allowed = allowed_from_json(model, read_shield(shield_path, model), "--shield")
    return plan_visits(model, est, complete_shield(model, allowed), epsilon)


def _common_target(est, relevant, epsilon, bound) -> tuple[np.ndarray, float]:
    """The least N with V̄ ≤ ε when every relevant row has max(visits, N) visits (doubling, then
    bisection), or :data:`MAX_VISITS` when even that is not enough: (target at N, V̄ at
    :data:`MAX_VISITS`, the limit)."""

    def at(n: int) -> np.ndarray:
        return np.where(relevant, np.maximum(est.visits, n), est.visits)

    top = at(MAX_VISITS)
    top_bound = bound(top)
    if top_bound > epsilon:
        return top, top_bound
    lo, hi = 0, 1  # bound(at(lo)) > ε (lo = 0: today's logs), bound(at(hi)) ≤ ε after doubling
    while hi < MAX_VISITS and bound(at(hi)) > epsilon:
        lo, hi = hi, min(2 * hi, MAX_VISITS)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if bound(at(mid)) <= epsilon else (mid, hi)
    return at(hi), top_bound


def _prune(est, target, epsilon, bound) -> np.ndarray:
    """Give rows back their ``need`` 0, largest need first, while the bound stays ≤ ε."""
    target = target.copy()
    need = target - est.visits
    for flat in np.argsort(-need, axis=None, kind="stable"):
        s, a = np.unravel_index(flat, need.shape)
        if need[s, a] <= 0:
            break
        trial = target.copy()
        trial[s, a] = est.visits[s, a]
        if bound(trial) <= epsilon:
            target = trial
    return target
