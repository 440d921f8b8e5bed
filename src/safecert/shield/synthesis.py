"""Least-restrictive shield synthesis (paper Sec. IV, Alg. 1 as reconstructed in docs/methods.md).

Every method returns a shield D with V̄_T(s0; D) ≤ ε, or the all-halt shield (V̄_T = 0, Prop. 3),
so by Cor. 2 the certificate of the output holds with confidence 1 − δ although D was chosen from
the same logs. Three methods:

* ``"greedy"`` — Alg. 1: start from the full shield; while V̄_T(s0) > ε evaluate every effective
  candidate removal of a non-halt (s, a) in one batched robust VI and remove the best by, in
  lexicographic order, (reduction of V̄_T(s0) per cost, reduction of the mean of V̄_T over live states
  per cost), cost c = ρ(s,a) + ρ_min with ρ the occupancy of a goal-directed reference policy;
  candidates that keep the goal reachable from s0 first, the others only when no reachable-preserving
  candidate reduces anything. The secondary score is what un-stalls the literal greedy (at
  V̄_T(s0) = 1 every single removal reduces it by 0). When values are saturated so that *no* single
  removal changes anything (small M: several moves into the hazard tie at Q = 1), the pair with the
  largest Σ_k Q_k(s,a) per cost is removed instead (our stall breaker); all-halt only when no
  non-halt pair is left. A removal that never is the strict argmax of any backup cannot change V̄
  and is skipped without evaluation. When greedy's shield makes the goal unreachable from s0 and
  ``additive``'s keeps it reachable, greedy returns additive's shield (``fell_back_to``; both meet ε,
  so the certificate is unaffected, and the checker re-runs the same rule).
* ``"additive"`` — start from all-halt and add non-halt pairs in order of decreasing ρ (ties: lower
  robust Q first), keeping each only if V̄_T(s0) stays ≤ ε. The result is inclusion-maximal: no single
  forbidden pair can be given back (V̄ is monotone in D). Batched exactly: a round evaluates each
  remaining pair alone (failures are final, by monotonicity) and then prefixes of the passing ones.
* ``"robust_q"`` — the sandbox variant: repeatedly forbid the permitted non-halt pair, in a state
  :func:`reachable` from s0 under the current shield, with the highest robust Q-value of the last
  backup whose removal keeps the goal reachable; all-halt if none does. (Pairs in unreachable
  states cannot change V̄_T(s0); removing them only costs permissiveness.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from safecert.errors import ConfigError
from safecert.shield.estimate import RowEstimates
from safecert.shield.model import ShieldModel
from safecert.shield.reach import Rows, robust_rows, value_iteration

METHODS = ("greedy", "additive", "robust_q")
TOL = 1e-12


@dataclass
class SynthesisResult:
    """A synthesized shield and its certificate V̄_T(s0)."""

    allowed: np.ndarray  # (n, m) bool
    bound: float
    values: np.ndarray  # V̄_T per state (n,)
    method: str
    epsilon: float
    fallback_all_halt: bool
    goal_reachable: bool | None
    forbidden_fraction: float
    steps: list[tuple[int, int]] = field(default_factory=list)  # pairs removed / added, in order
    fell_back_to: str | None = None  # "additive" when greedy lost the goal and additive kept it


def forbidden_fraction(model: ShieldModel, allowed: np.ndarray) -> float:
    """Forbidden live pairs / all live pairs (:attr:`ShieldModel.live_pairs`: every action of
    every working state, halt counted and never forbidden). The one definition used for ours and
    every baseline (the sandbox's 96 live pairs, the grid's 40 × 5)."""
    return float((~allowed[model.working]).sum() / max(model.live_pairs, 1))


def reachable(model: ShieldModel, rows: Rows, allowed: np.ndarray) -> np.ndarray:
    """States where a decision can be taken at some step 0..T−1 from s0 under ``allowed``:
    closure of s0 under the declared successors K(s,a) of allowed non-halt actions (any K entry
    can carry mass in some confidence set), not leaving S_u, at most T − 1 transitions. A pair
    in any other state cannot change V̄_T(s0)."""
    n = model.n_states
    go = allowed.copy()
    go[:, model.halt] = False
    go[model.unsafe] = False
    adj = np.zeros((n + 1, n + 1), dtype=bool)
    s, a, j = np.nonzero(go[..., None] & rows.valid)
    adj[s, rows.succ[s, a, j]] = True
    seen = np.zeros(n + 1, dtype=bool)
    seen[model.initial] = True
    for _ in range(model.horizon - 1):
        new = seen | adj[seen].any(axis=0)
        if (new == seen).all():
            break
        seen = new
    return seen[:n]


def all_halt(model: ShieldModel) -> np.ndarray:
    allowed = np.zeros(model.k.shape, dtype=bool)
    allowed[:, model.halt] = True
    return allowed


def _edges(model: ShieldModel, rows: Rows) -> np.ndarray:
    """The edges of "the goal stays reachable", per row over K(s,a): only what was *seen*.

    A row estimated from logs contributes its likely *logged* outcomes: successors seen at least
    half as often as the row's most frequent one (a grid move's intended cell, not its slips; both
    outcomes of a fair coin) — in every row, vacuous ones included (a row short of its budget
    still shows where its visits went); a row never visited contributes nothing. An exact row
    (|K| = 1) leads to its only successor (the model says so). Rows not estimated from logs
    (known kernels, baselines) use their likely outcomes under ``p``. A liveness heuristic, not
    part of the certificate: before, a vacuous row contributed its whole declared K(s,a), so a
    shield forbidding the task's only tool still called the goal reachable through an unlogged
    row.
    """
    weight = rows.p
    if rows.seen is not None:
        stochastic = rows.valid.sum(-1) >= 2
        weight = np.where(stochastic[..., None], rows.seen, rows.p)
    top = weight.max(axis=-1, keepdims=True)
    likely = (weight > 0) & (weight >= 0.5 * top)
    return rows.valid & likely


def goal_route(
    model: ShieldModel, rows: Rows, allowed: np.ndarray
) -> list[tuple[int, int, int]] | None:
    """A shortest witness path (s, a, s') from s0 to a goal state through :func:`_edges` of
    allowed non-halt actions, avoiding S_u: the rows goal reachability relied on ([] when s0 is a
    goal; None when no goal is reachable or the model has no goal)."""
    if model.goal is None:
        return None
    possible = _edges(model, rows)
    parent: dict[int, tuple[int, int, int] | None] = {model.initial: None}
    frontier = [model.initial]
    while frontier:
        nxt: list[int] = []
        for s in frontier:
            if model.goal[s]:
                route: list[tuple[int, int, int]] = []
                step = parent[s]
                while step is not None:
                    route.append(step)
                    step = parent[step[0]]
                return route[::-1]
            for a in np.flatnonzero(allowed[s]):
                if a == model.halt:
                    continue
                for s2 in rows.succ[s, a][possible[s, a]]:
                    s2 = int(s2)
                    if s2 < model.n_states and s2 not in parent and not model.unsafe[s2]:
                        parent[s2] = (s, int(a), s2)
                        nxt.append(s2)
        frontier = nxt
    return None


def goal_reachable(model: ShieldModel, rows: Rows, allowed: np.ndarray) -> bool | None:
    """Is some goal state reachable from s0 through :func:`_edges` (likely *logged* outcomes;
    exact rows) of allowed non-halt actions, avoiding S_u? (None when the model has no goal.)"""
    if model.goal is None:
        return None
    return goal_route(model, rows, allowed) is not None


def goal_policy(model: ShieldModel, rows: Rows) -> list[np.ndarray]:
    """Per step t = 0..T−1, the action maximising the (plug-in) probability of reaching the goal
    within the remaining steps while avoiding S_u; vacuous rows count as never reaching it."""
    n = model.n_states
    p = np.where(np.isinf(rows.radius)[..., None], 0.0, rows.p)
    p[:, model.halt] = 0.0
    goal = np.r_[model.goal & model.live, False]
    values = goal.astype(np.float64)
    policies = []
    for _ in range(model.horizon):
        q = np.einsum("sak,sak->sa", p, values[rows.succ])
        policies.append(q.argmax(axis=1))
        new = q.max(axis=1)
        new[model.unsafe] = 0.0
        values[:n] = np.where(goal[:n], 1.0, new)
    return policies[::-1]


def reference_occupancy(model: ShieldModel, rows: Rows, est: RowEstimates) -> np.ndarray:
    """ρ(s,a): occupancy over T steps from s0 of a goal-directed reference policy, normalised.

    The policy maximises the plug-in (P̂) probability of reaching the goal within T while avoiding
    S_u (vacuous rows count as never reaching it); ties go to the first action. Without a goal the
    logged visit frequencies are used.
    """
    n, m = model.k.shape
    if model.goal is None:
        visits = np.where(model.live[:, None], est.visits, 0).astype(np.float64)
        visits[:, model.halt] = 0
        return visits / max(visits.sum(), 1.0)
    policies = goal_policy(model, rows)
    p = np.where(np.isinf(rows.radius)[..., None], 0.0, rows.p)
    occ = np.zeros((n, m))
    dist = np.zeros(n + 1)
    dist[model.initial] = 1.0
    for best in policies:
        live = model.live & ~model.goal & (dist[:n] > 0)
        occ[live, best[live]] += dist[:n][live]
        new = np.zeros(n + 1)
        new[:n][~live] = dist[:n][~live]
        idx = np.flatnonzero(live)
        np.add.at(new, rows.succ[idx, best[idx]], dist[idx, None] * p[idx, best[idx]])
        dist = new
    return occ / max(occ.sum(), 1e-300)


def synthesize(
    model: ShieldModel,
    est: RowEstimates,
    epsilon: float,
    *,
    method: str = "greedy",
    rho_min: float = 1e-3,
    occupancy: np.ndarray | None = None,
    rows: Rows | None = None,
) -> SynthesisResult:
    """Least-restrictive shield with V̄_T(s0) ≤ ε (see the module docstring for the methods).

    ``rows`` replaces the confidence sets built from ``est`` (Lemma 2, :func:`robust_rows`) by
    other row sets — the plug-in and Dirichlet baselines; ``est`` then only supplies visit counts
    for the occupancy when the model has no goal. The guarantee ``bound ≤ ε`` is about the sets
    used; it is a 1 − δ certificate only for the Lemma 2 sets.
    """
    if method not in METHODS:
        raise ConfigError(f"unknown method {method!r}", field="method", fix=f"use {METHODS}")
    if not 0 <= epsilon < 1:
        raise ConfigError(f"must be in [0, 1), got {epsilon}", field="epsilon")
    rows = robust_rows(model, est) if rows is None else rows
    rho = reference_occupancy(model, rows, est) if occupancy is None else occupancy
    cost = rho + rho_min
    run = {"greedy": _greedy, "additive": _additive, "robust_q": _robust_q}[method]
    allowed, steps = run(model, rows, epsilon, cost)
    fell_back_to = None
    if method == "greedy" and goal_reachable(model, rows, allowed) is False:
        # greedy may wall the agent in where additive keeps the goal: then take additive's shield
        added, added_steps = _additive(model, rows, epsilon, cost)
        if goal_reachable(model, rows, added):
            allowed, steps, fell_back_to = added, added_steps, "additive"
    values, _ = value_iteration(rows, allowed, model.horizon)
    bound = float(values[model.initial])
    fallback = bool((allowed == all_halt(model)).all()) and bound == 0.0
    if bound > epsilon + TOL:  # cannot happen by construction; never return an uncertified shield
        allowed, fallback = all_halt(model), True
        values, _ = value_iteration(rows, allowed, model.horizon)
        bound = float(values[model.initial])
    return SynthesisResult(
        allowed=allowed,
        bound=bound,
        values=values[: model.n_states],
        method=method,
        epsilon=epsilon,
        fallback_all_halt=fallback,
        goal_reachable=goal_reachable(model, rows, allowed),
        forbidden_fraction=forbidden_fraction(model, allowed),
        steps=steps,
        fell_back_to=fell_back_to,
    )


def _candidates(model: ShieldModel, allowed: np.ndarray) -> np.ndarray:
    mask = allowed & model.live[:, None]
    mask[:, model.halt] = False
    return np.argwhere(mask)


def _effective(q: np.ndarray, allowed: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """Pairs that are the strict argmax of some backup Q_k (only these can change V̄)."""
    qq = np.where(allowed, q, -np.inf)  # (T, n, m)
    s, a = pairs[:, 0], pairs[:, 1]
    mine = qq[:, s, a]
    others = qq[:, s, :].copy()
    others[:, np.arange(len(s)), a] = -np.inf
    return (mine > others.max(axis=-1)).any(axis=0)


def _greedy(model, rows, epsilon, cost):
    allowed = np.ones(model.k.shape, dtype=bool)
    s0, live = model.initial, model.live
    steps: list[tuple[int, int]] = []
    values, q = value_iteration(rows, allowed, model.horizon, keep_q=True)
    while True:
        if values[s0] <= epsilon:
            return allowed, steps
        every = _candidates(model, allowed)
        if not len(every):
            return all_halt(model), steps
        pairs = every[_effective(q, allowed, every)]
        order = np.array([], dtype=np.int64)
        cand_q = None
        if len(pairs):
            batch = np.broadcast_to(allowed, (len(pairs),) + allowed.shape).copy()
            batch[np.arange(len(pairs)), pairs[:, 0], pairs[:, 1]] = False
            cand, cand_q = value_iteration(rows, batch, model.horizon, keep_q=True)
            c = cost[pairs[:, 0], pairs[:, 1]]
            d0 = (values[s0] - cand[:, s0]) / c
            mean = values[: model.n_states][live].mean()
            dmean = (mean - cand[:, : model.n_states][:, live].mean(1)) / c
            order = np.lexsort((-dmean, -d0))  # primary d0, secondary dmean, both descending
            order = order[((d0 > TOL) | (dmean > TOL))[order]]
        if not len(order):
            # stall breaker: saturated values (every single removal changes nothing, e.g. two
            # moves into the hazard tie at Q = 1) -> the riskiest pair per cost, summed over k
            pairs, cand_q = every, None
            risk = np.where(np.isfinite(q), q, 0.0)[:, pairs[:, 0], pairs[:, 1]].sum(0)
            order = np.argsort(-risk / cost[pairs[:, 0], pairs[:, 1]], kind="stable")
        chosen = order[0]
        if model.goal is not None:
            for i in order:
                trial = allowed.copy()
                trial[tuple(pairs[i])] = False
                if goal_reachable(model, rows, trial):
                    chosen = i
                    break
        s, a = (int(x) for x in pairs[chosen])
        allowed[s, a] = False
        steps.append((s, a))
        if cand_q is not None:  # the chosen candidate's VI is the next round's base
            values, q = cand[chosen], cand_q[:, chosen]
        else:
            values, q = value_iteration(rows, allowed, model.horizon, keep_q=True)


def _additive(model, rows, epsilon, cost):
    allowed = all_halt(model)
    s0 = model.initial
    full_q = value_iteration(rows, np.ones(model.k.shape, bool), model.horizon, keep_q=True)[1][-1]
    pairs = _candidates(model, np.ones(model.k.shape, bool))
    keys = (full_q[pairs[:, 0], pairs[:, 1]], -cost[pairs[:, 0], pairs[:, 1]])
    queue = [tuple(int(x) for x in pairs[i]) for i in np.lexsort(keys)]
    steps: list[tuple[int, int]] = []
    while queue:
        idx = np.array(queue)
        single = np.broadcast_to(allowed, (len(queue),) + allowed.shape).copy()
        single[np.arange(len(queue)), idx[:, 0], idx[:, 1]] = True
        ok = value_iteration(rows, single, model.horizon)[0][:, s0] <= epsilon
        queue = [pq for pq, good in zip(queue, ok, strict=True) if good]  # failures are final
        if not queue:
            break
        prefix = np.broadcast_to(allowed, (len(queue),) + allowed.shape).copy()
        for j, (s, a) in enumerate(queue):
            prefix[j:, s, a] = True
        ok = value_iteration(rows, prefix, model.horizon)[0][:, s0] <= epsilon
        first_bad = int(np.argmin(ok)) if not ok.all() else len(queue)
        for s, a in queue[:first_bad]:
            allowed[s, a] = True
            steps.append((s, a))
        queue = queue[first_bad + 1 :]  # the first failing prefix's new pair fails on its own now
    return allowed, steps


def _robust_q(model, rows, epsilon, cost):
    allowed = np.ones(model.k.shape, dtype=bool)
    steps: list[tuple[int, int]] = []
    while True:
        values, q = value_iteration(rows, allowed, model.horizon, keep_q=True)
        if values[model.initial] <= epsilon:
            return allowed, steps
        pairs = _candidates(model, allowed)
        pairs = pairs[reachable(model, rows, allowed)[pairs[:, 0]]]
        last = q[-1][pairs[:, 0], pairs[:, 1]]
        order = np.lexsort((cost[pairs[:, 0], pairs[:, 1]], -last))
        for i in order:
            trial = allowed.copy()
            trial[tuple(pairs[i])] = False
            if model.goal is None or goal_reachable(model, rows, trial):
                allowed = trial
                steps.append((int(pairs[i][0]), int(pairs[i][1])))
                break
        else:
            return all_halt(model), steps
