"""L1 confidence sets on kernel rows and their inner maximisation (paper Lemma 2, Prop. 1).

C_{s,a} = { q ∈ Δ(K_{s,a}) : ‖q − P̂_a(s)‖₁ ≤ β_{s,a} } with

    β_{s,a} = sqrt( (2 / n0) · ln( R · (2^k − 2) / δ ) ),   k = |K_{s,a}|,

R the number of stochastic rows. Under the committed budget, with probability ≥ 1 − δ every
(non-vacuous) set contains its true row, all rows at once (Azuma–Hoeffding per subset A ⊆ K plus a
union bound over the 2^k − 2 nontrivial subsets and the R rows). Vacuous rows use the whole simplex
(radius ∞), deterministic rows radius 0. Prop. 2: a declared Markov tolerance η enlarges every
radius to β + η.

σ(C; V) = max_{q ∈ C} ⟨q, V⟩ is solved in closed form: sort K by V descending, move
ξ = min(β/2, 1 − q_top) onto the highest-V entry and take it from the lowest-V entries in order.
Vectorised over any leading batch shape; padded entries (``valid`` False) carry no mass and never
receive any.
"""

from __future__ import annotations

import numpy as np


def beta(n0: np.ndarray, k: np.ndarray, rows: int, delta: float) -> np.ndarray:
    """Radius β per row (0 where k == 1, ∞ where n0 == 0 on a stochastic row).

    ``ln(2^k − 2)`` is evaluated as ``k ln 2 + log1p(−2^{1−k})`` so large K do not overflow.
    """
    n0 = np.asarray(n0, dtype=np.float64)
    k = np.asarray(k, dtype=np.int64)
    kk = np.maximum(k, 2).astype(np.float64)
    log_subsets = kk * np.log(2.0) + np.log1p(-np.exp2(1.0 - kk))
    log_term = np.log(max(rows, 1)) + log_subsets - np.log(delta)
    with np.errstate(divide="ignore"):
        radius = np.sqrt(2.0 * log_term / n0)
    radius = np.where(n0 > 0, radius, np.inf)
    return np.where(k <= 1, 0.0, radius)


def inner_max(
    values: np.ndarray, p_hat: np.ndarray, radius: np.ndarray, valid: np.ndarray
) -> np.ndarray:
    """σ(C; V) for a batch of rows.

    ``values``/``p_hat``/``valid``: (..., k) — V on K(s,a), P̂ on K(s,a), which entries are real;
    ``radius``: (...) — β (+η); ∞ means vacuous (σ = max over valid V).
    Returns (...,). Exact optimum of the LP (Prop. 1), O(k log k) per row.
    """
    return _solve(values, p_hat, radius, valid)[0]


def worst_distribution(
    values: np.ndarray, p_hat: np.ndarray, radius: np.ndarray, valid: np.ndarray
) -> np.ndarray:
    """The maximiser q* of σ(C; V) (same shapes as ``p_hat``); for tests and adversaries."""
    return _solve(values, p_hat, radius, valid)[1]


def _solve(
    values: np.ndarray, p_hat: np.ndarray, radius: np.ndarray, valid: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    v = np.where(valid, values, -np.inf)
    order = np.argsort(-v, axis=-1, kind="stable")  # descending V; padding last
    vs = np.take_along_axis(v, order, axis=-1)
    ps = np.take_along_axis(np.where(valid, p_hat, 0.0), order, axis=-1)
    vacuous = ~np.isfinite(radius)
    # ξ: half the radius, capped by the top entry's capacity (= the mass of all the others)
    xi = np.minimum(np.where(vacuous, 1.0, radius / 2.0), 1.0 - ps[..., 0])
    xi = np.maximum(xi, 0.0)
    # remove ξ from the lowest-V entries first: mass strictly below entry j, from the bottom
    rest = ps[..., 1:]
    below = np.flip(np.cumsum(np.flip(rest, -1), -1), -1) - rest
    take = np.clip(xi[..., None] - below, 0.0, rest)
    qs = np.concatenate([ps[..., :1] + xi[..., None], rest - take], axis=-1)
    # vacuous rows: all mass on the top entry
    qs = np.where(vacuous[..., None], np.eye(1, qs.shape[-1], dtype=qs.dtype)[0], qs)
    vfin = np.where(np.isfinite(vs), vs, 0.0)
    sigma = np.einsum("...k,...k->...", qs, vfin)
    q = np.empty_like(qs)
    np.put_along_axis(q, order, qs, axis=-1)
    return sigma, q
