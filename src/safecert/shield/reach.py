"""Finite-horizon reach–avoid value iteration, robust (Thm. 1) and exact (eq. 3).

States are the model's states plus the halt sink ⊥ (index n, value 0); unsafe states have value 1
at every step. A shield is a boolean array ``allowed[s, a]`` (halt always allowed); any leading
batch dimensions evaluate many shields at once (synthesis evaluates every candidate removal in one
call).

Robust:  V̄_k(s) = max_{a ∈ D(s)} σ(C_{s,a}; V̄_{k−1}).  On the event E of Lemma 2 (probability
≥ 1 − δ over the logs) V̄_T(s0) bounds the probability that *any* admissible controller reaches
S_u within T executed calls — for every shield at once (Cor. 2). With η > 0 the radii are β + η
(Prop. 2).

Exact:   V_k(s) = max_{a ∈ D(s)} Σ_{s'} P(s'|s,a) V_{k−1}(s'), the worst admissible controller under
a known kernel P (ground truth for the grid experiments).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from safecert.errors import ConfigError
from safecert.shield.confidence import (
    NETWORK_MAX_K,
    anytime_beta,
    beta,
    inner_max,
    inner_max_columns,
)
from safecert.shield.estimate import RowEstimates
from safecert.shield.model import ShieldModel


@dataclass(frozen=True)
class Rows:
    """Kernel rows over K(s,a): successor indices (padding → sink, ``valid`` False), a centre
    distribution ``p``, an L1 radius (0 exact, ∞ vacuous) and, for rows estimated from logs, the
    logged successor counts ``seen`` (what goal reachability may rely on; None otherwise)."""

    succ: np.ndarray  # (n, m, k) int, padding replaced by the sink index
    valid: np.ndarray  # (n, m, k) bool
    p: np.ndarray  # (n, m, k) float
    radius: np.ndarray  # (n, m) float
    unsafe: np.ndarray  # (n,) bool
    halt: int
    seen: np.ndarray | None = None  # (n, m, k) int: logged successors (estimated rows only)

    @property
    def n_states(self) -> int:
        return self.unsafe.shape[0]

    @cached_property
    def _robust(self) -> bool:
        """Some stochastic row has a positive radius (else the backup is a plain expectation)."""
        return bool(np.any(self._split[5]))

    @cached_property
    def _split(self) -> tuple[np.ndarray, ...]:
        """Flat row ids and data of deterministic (k = 1) and stochastic rows."""
        k = self.valid.sum(-1).reshape(-1)
        succ, p = self.succ.reshape(k.size, -1), self.p.reshape(k.size, -1)
        det, sto = np.flatnonzero(k == 1), np.flatnonzero(k >= 2)
        kmax = int(k[sto].max()) if len(sto) else 1
        return (
            det,
            succ[det, 0],
            sto,
            np.ascontiguousarray(succ[sto, :kmax]),
            np.ascontiguousarray(p[sto, :kmax]),
            self.radius.reshape(-1)[sto],
            np.ascontiguousarray(succ[sto, :kmax].T),
            np.ascontiguousarray(p[sto, :kmax].T),
        )


def _table(model: ShieldModel) -> tuple[np.ndarray, np.ndarray]:
    valid = model.succ >= 0
    return np.where(valid, model.succ, model.sink), valid


def robust_rows(
    model: ShieldModel, est: RowEstimates, *, eta: float | None = None, delta: float | None = None
) -> Rows:
    """Confidence sets of Lemma 2 from committed-budget estimates (radius β + η), or the
    time-uniform sets of every visit when ``est.anytime`` (radius β_any(n) + η)."""
    eta = model.eta if eta is None else eta
    delta = model.delta if delta is None else delta
    succ, valid = _table(model)
    if est.anytime:
        radius = anytime_beta(est.visits, est.k, model.stochastic_rows, delta)
    else:
        radius = beta(est.n0, est.k, model.stochastic_rows, delta)
    radius = np.where(est.vacuous, np.inf, radius)
    radius = np.where(est.k >= 2, radius + eta, 0.0)
    return Rows(succ, valid, est.p_hat, radius, model.unsafe.copy(), model.halt, est.counts)


def exact_rows(model: ShieldModel, probs: np.ndarray) -> Rows:
    """A known kernel ``probs[s, a, j] = P(succ[s,a,j] | s, a)`` (rows sum to 1 over K)."""
    succ, valid = _table(model)
    probs = np.where(valid, probs, 0.0)
    if probs.shape != succ.shape or not np.allclose(probs.sum(-1), 1.0, atol=1e-9):
        raise ConfigError("kernel rows must be distributions over K(s,a)", field="kernel")
    return Rows(succ, valid, probs, np.zeros(model.k.shape), model.unsafe.copy(), model.halt)


def full_shield(model: ShieldModel) -> np.ndarray:
    """Every action allowed everywhere."""
    return np.ones(model.k.shape, dtype=bool)


def backup(rows: Rows, values: np.ndarray) -> np.ndarray:
    """Q(s,a) = σ(C_{s,a}; V) for V of shape (..., n+1); returns (..., n, m).

    Deterministic rows are a gather; only stochastic rows are sorted. Padding points at the sink
    (V = 0) with P̂ = 0, which cannot change σ, so no mask is needed.
    """
    n, m, _ = rows.succ.shape
    batch = values.shape[:-1]
    det, det_succ, sto, sto_succ, sto_p, sto_radius, succ_t, p_t = rows._split
    q = np.empty(batch + (n * m,))
    q[..., det] = values[..., det_succ]
    if len(sto):
        kk = sto_succ.shape[1]
        if rows._robust and kk <= NETWORK_MAX_K:
            cols = values[..., succ_t]  # (..., k, R): contiguous columns
            q[..., sto] = inner_max_columns(
                [cols[..., j, :] for j in range(kk)], list(p_t), sto_radius
            )
        elif rows._robust:
            q[..., sto] = inner_max(values[..., sto_succ], sto_p, sto_radius)
        else:
            gathered = values[..., sto_succ]
            q[..., sto] = np.einsum(
                "...k,...k->...", gathered, np.broadcast_to(sto_p, gathered.shape)
            )
    return q.reshape(batch + (n, m))


def value_iteration(
    rows: Rows, allowed: np.ndarray, horizon: int, *, keep_q: bool = False
) -> tuple[np.ndarray, np.ndarray | None]:
    """V_T over states + sink, shape ``allowed.shape[:-2] + (n+1,)``.

    With ``keep_q`` also returns Q_k for k = 1..T, shape (T, ..., n, m) (−∞ where forbidden).
    """
    allowed = np.asarray(allowed, dtype=bool).copy()
    allowed[..., rows.halt] = True
    batch = allowed.shape[:-2]
    n = rows.n_states
    values = np.zeros(batch + (n + 1,))
    values[..., :n][..., rows.unsafe] = 1.0
    qs: list[np.ndarray] | None = [] if keep_q else None
    for _ in range(horizon):
        q = np.where(allowed, backup(rows, values), -np.inf)
        if qs is not None:
            qs.append(q)
        values[..., :n] = _maximise(rows, q)
    return values, (np.stack(qs) if qs is not None else None)


def _maximise(rows: Rows, q: np.ndarray) -> np.ndarray:
    """V(s) = max_a Q(s,a), 1 on S_u. The max over actions reduces a contiguous copy with the
    action axis first (a reduction over the short last axis, or over a strided view of it, is
    about ten times slower); the max is exact, so the order does not matter. The clip is
    rounding only: true values lie in [0, 1]."""
    new = np.clip(np.maximum.reduce(np.ascontiguousarray(np.moveaxis(q, -1, 0))), 0.0, 1.0)
    new[..., rows.unsafe] = 1.0
    return new


def certificate(
    model: ShieldModel, est: RowEstimates, allowed: np.ndarray | None = None
) -> tuple[float, np.ndarray]:
    """(V̄_T(s0), V̄_T per state) for a shield (default: the full shield)."""
    rows = robust_rows(model, est)
    allowed = full_shield(model) if allowed is None else allowed
    values, _ = value_iteration(rows, allowed, model.horizon)
    return float(values[model.initial]), values[: model.n_states]
