"""Markov diagnostic on logs (paper Experiment 4, Table V).

Assumption A1 says that, given the current abstract state and action, the next state does not
depend on anything earlier. For each row (s, a) we split its logged successors by a *context* — the
previous abstract state (``"state"``; the first step of an episode has context ``start``) or the
previous state and action (``"state_action"``) — and test independence of context and successor:

* a likelihood-ratio **G-test** on the context × successor table (``scipy.stats.chi2_contingency``
  with ``lambda_="log-likelihood"``), over contexts with at least ``min_context`` visits; a row is
  *testable* when at least two such contexts remain and two successors were seen;
* **Benjamini–Hochberg** at FDR ``alpha`` (5 %) over the testable rows
  (``scipy.stats.false_discovery_control``);
* effect size **η̂** = the largest L1 distance between context-conditional successor
  distributions over all testable rows, against a **permutation null**: context labels shuffled
  within each row, ``permutations`` times; ``eta_null`` is the 95 % quantile.

It can refute a predicate set, never certify one: only visited rows can be tested, dependence this
context cannot see is invisible, and η̂ is an effect size for one context, not the supremum over
histories that Prop. 2 needs. Steps stream (memory: counts per row and context, plus the last state
of each open episode).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from safecert.errors import ConfigError
from safecert.shield.logs import Step
from safecert.shield.model import ShieldModel

CONTEXTS = ("state", "state_action")


@dataclass(frozen=True)
class RowTest:
    """One testable row: the G statistic, its p-value, BH-adjusted p-value and decision."""

    state: str
    action: str
    visits: int
    contexts: int
    g: float
    dof: int
    p_value: float
    p_adjusted: float
    reject: bool
    eta: float


@dataclass(frozen=True)
class Diagnosis:
    """Result of :func:`diagnose`; ``rows`` lists the testable rows."""

    context: str
    alpha: float
    min_context: int
    rows: list[RowTest] = field(default_factory=list)
    eta_hat: float = 0.0
    eta_null: float = 0.0
    permutations: int = 0
    rows_visited: int = 0

    @property
    def testable(self) -> int:
        return len(self.rows)

    @property
    def rejected(self) -> int:
        return sum(r.reject for r in self.rows)

    def to_json(self) -> dict:
        return {
            "context": self.context,
            "alpha": self.alpha,
            "min_context": self.min_context,
            "rows_visited": self.rows_visited,
            "testable": self.testable,
            "rejected": self.rejected,
            "eta_hat": self.eta_hat,
            "eta_null_95": self.eta_null,
            "eta_exceeds_null": self.eta_hat > self.eta_null,
            "permutations": self.permutations,
            "rows": [r.__dict__ for r in self.rows],
        }


def context_counts(
    model: ShieldModel, steps: Iterable[Step], context: str = "state"
) -> dict[tuple[int, int], dict[int, np.ndarray]]:
    """``{(s, a): {context id: successor counts over K(s,a)}}`` for stochastic live rows."""
    if context not in CONTEXTS:
        raise ConfigError(f"unknown context {context!r}", field="context", fix=f"use {CONTEXTS}")
    m = len(model.actions)
    start = -1
    last: dict[str, int] = {}
    table: dict[tuple[int, int], dict[int, np.ndarray]] = {}
    for st in steps:
        ctx = last.get(st.episode, start) if st.t > 0 else start
        if model.k[st.state, st.action] >= 2 and model.live[st.state]:
            row = table.setdefault((st.state, st.action), {})
            counts = row.get(ctx)
            if counts is None:
                counts = row[ctx] = np.zeros(model.k[st.state, st.action], dtype=np.int64)
            counts[st.pos] += 1
        last[st.episode] = st.state if context == "state" else st.state * m + st.action
    return table


def _max_l1(table: np.ndarray) -> float:
    """Largest L1 distance between the rows of a contexts × successors count table."""
    dist = table / table.sum(1, keepdims=True)
    return float(np.abs(dist[:, None, :] - dist[None, :, :]).sum(-1).max())


def diagnose(
    model: ShieldModel,
    steps: Iterable[Step],
    *,
    context: str = "state",
    alpha: float = 0.05,
    min_context: int = 20,
    permutations: int = 200,
    rng: np.random.Generator | None = None,
) -> Diagnosis:
    """Run the Markov diagnostic (see module docstring) on a stream of validated steps."""
    if not 0 < alpha < 1:
        raise ConfigError(f"must lie in (0, 1), got {alpha}", field="alpha")
    if permutations < 0:
        raise ConfigError(f"must be >= 0, got {permutations}", field="permutations")
    if min_context < 1:
        raise ConfigError(f"must be >= 1, got {min_context}", field="min_context")
    rng = rng if rng is not None else np.random.default_rng(0)
    counts = context_counts(model, steps, context)
    tables, keys = [], []
    for (s, a), by_ctx in sorted(counts.items()):
        kept = [c for c in by_ctx.values() if c.sum() >= min_context]
        if len(kept) < 2:
            continue
        tab = np.array(kept)
        tab = tab[:, tab.sum(0) > 0]
        if tab.shape[1] < 2:
            continue
        tables.append(tab)
        keys.append((s, a))
    if not tables:
        return Diagnosis(context, alpha, min_context, rows_visited=len(counts))
    results = [
        stats.chi2_contingency(t, correction=False, lambda_="log-likelihood") for t in tables
    ]
    pvals = np.array([r.pvalue for r in results])
    adjusted = stats.false_discovery_control(pvals, method="bh")
    etas = [_max_l1(t) for t in tables]
    null = np.zeros(permutations)
    for t in tables:  # shuffle context labels within the row, keep both margins
        ctx = np.repeat(np.arange(t.shape[0]), t.sum(1))
        succ = np.concatenate([np.repeat(np.arange(t.shape[1]), row) for row in t])
        for b in range(permutations):
            perm = rng.permutation(ctx)
            shuffled = np.zeros_like(t)
            np.add.at(shuffled, (perm, succ), 1)
            null[b] = max(null[b], _max_l1(shuffled))
    rows = [
        RowTest(
            state=model.labels[s],
            action=model.actions[a],
            visits=int(t.sum()),
            contexts=int(t.shape[0]),
            g=float(r.statistic),
            dof=int(r.dof),
            p_value=float(r.pvalue),
            p_adjusted=float(q),
            reject=bool(q <= alpha),
            eta=float(e),
        )
        for (s, a), t, r, q, e in zip(keys, tables, results, adjusted, etas, strict=True)
    ]
    return Diagnosis(
        context,
        alpha,
        min_context,
        rows,
        eta_hat=float(max(etas)),
        eta_null=float(np.quantile(null, 0.95)) if permutations else 0.0,
        permutations=permutations,
        rows_visited=len(counts),
    )
