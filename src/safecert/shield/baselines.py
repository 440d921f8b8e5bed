"""The four baseline shields of Table III, built from the same logs as ours (docs/methods.md).

* **plug-in** — certainty equivalence: the empirical kernel (all visits) is taken as exact; an
  unvisited row is assumed to do nothing (its unseen hazards get probability 0). It certifies
  V_T = 0 for the full shield, so it forbids nothing.
* **policy-specific** — a Clopper–Pearson bound on the logged episodes' harm rate: valid only for
  the logging controller, it certifies ≈ 0 and forbids nothing.
* **count threshold** — forbid every non-halt pair seen fewer than ``threshold`` (10) times. No
  certificate (``bound`` is ``None``).
* **Bayesian Dirichlet** (:func:`dirichlet_rows` + :func:`synthesized`) — per row a Dirichlet(1 + counts) posterior over K(s,a); its credible L1
  ball (radius = the 1 − δ/R posterior quantile of ‖q − mean‖₁, by Monte Carlo) replaces our
  distribution-free set in the same robust VI and synthesis. The bound is credible, not a
  frequentist guarantee.

Ours and the Dirichlet shield share one robust VI (:mod:`safecert.shield.reach`) and one synthesizer
(:mod:`safecert.shield.synthesis`); only the row sets differ.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from safecert.shield import synthesis
from safecert.shield.estimate import RowEstimates, estimate
from safecert.shield.logs import Step
from safecert.shield.model import ShieldModel
from safecert.shield.reach import Rows, full_shield
from safecert.stats import cp_upper

COUNT_THRESHOLD = 10


@dataclass(frozen=True)
class Baseline:
    """A shield and what it claims: ``bound`` (None when it certifies nothing)."""

    name: str
    allowed: np.ndarray
    bound: float | None


def full_counts(model: ShieldModel, steps: Iterable[Step]) -> RowEstimates:
    """Counts over *all* visits (no truncation): what the baselines use."""
    return estimate(model, steps, n0=np.where(model.k >= 2, np.iinfo(np.int64).max // 4, 0))


def _table(model: ShieldModel) -> tuple[np.ndarray, np.ndarray]:
    valid = model.succ >= 0
    return np.where(valid, model.succ, model.sink), valid


def plug_in_rows(model: ShieldModel, full: RowEstimates) -> Rows:
    """Empirical frequencies as exact rows; unvisited rows stay put (or take their first safe
    declared successor when staying is impossible)."""
    succ, valid = _table(model)
    p = np.zeros(succ.shape)
    seen = full.visits > 0
    p[seen] = full.counts[seen] / full.visits[seen][:, None]
    n, m = model.k.shape
    for s, a in np.argwhere(~seen | (model.k == 1)):
        ks = list(model.successors(s, a))
        safe = [x for x in ks if x == model.sink or not model.unsafe[x]]
        target = s if s in ks else (safe or ks)[0]
        p[s, a] = 0.0
        p[s, a, ks.index(target)] = 1.0
    return Rows(succ, valid, p, np.zeros(model.k.shape), model.unsafe.copy(), model.halt)


def dirichlet_rows(
    model: ShieldModel, full: RowEstimates, rng: np.random.Generator, draws: int = 4000
) -> Rows:
    """Posterior-mean rows with credible L1 radii at level 1 − δ/R (Monte Carlo quantile)."""
    succ, valid = _table(model)
    alpha = np.where(valid, full.counts + 1.0, 0.0)
    mean = alpha / np.maximum(alpha.sum(-1, keepdims=True), 1e-300)
    radius = np.zeros(model.k.shape)
    level = 1.0 - model.delta / max(model.stochastic_rows, 1)
    for s, a in np.argwhere((model.k >= 2) & model.live[:, None]):
        k = model.k[s, a]
        q = rng.dirichlet(alpha[s, a, :k], size=draws)
        radius[s, a] = np.quantile(np.abs(q - mean[s, a, :k]).sum(1), level)
    return Rows(succ, valid, mean, radius, model.unsafe.copy(), model.halt)


def synthesized(
    name: str, model: ShieldModel, rows: Rows, est: RowEstimates, epsilon: float, method: str
) -> Baseline:
    """SH-engine's synthesizer (:func:`synthesis.synthesize`) run on other row sets."""
    res = synthesis.synthesize(model, est, epsilon, method=method, rows=rows)
    return Baseline(name, res.allowed, res.bound)


def plug_in(model: ShieldModel, full: RowEstimates, epsilon: float, method: str) -> Baseline:
    return synthesized("plug-in", model, plug_in_rows(model, full), full, epsilon, method)


def policy_specific(model: ShieldModel, episodes: int, harmed: int) -> Baseline:
    """Clopper–Pearson upper bound on the logging agent's harm rate; the full shield."""
    bound = cp_upper(harmed, episodes, model.delta).value
    return Baseline("policy-specific", full_shield(model), float(bound))


def count_threshold(
    model: ShieldModel, full: RowEstimates, threshold: int = COUNT_THRESHOLD
) -> Baseline:
    allowed = full.visits >= threshold
    allowed[:, model.halt] = True
    allowed[~model.working] = True  # unsafe and absorbing states: nothing to decide
    return Baseline(f"count<{threshold}", allowed, None)


def ours(model: ShieldModel, est: RowEstimates, epsilon: float, method: str) -> Baseline:
    """Our certified shield (SH-engine's synthesis on the Lemma 2 sets)."""
    res = synthesis.synthesize(model, est, epsilon, method=method)
    return Baseline(f"ours ({method})", res.allowed, res.bound)
