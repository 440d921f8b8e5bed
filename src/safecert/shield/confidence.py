"""L1 confidence sets on kernel rows and their inner maximisation (paper Lemma 2, Prop. 1).

C_{s,a} = { q ∈ Δ(K_{s,a}) : ‖q − P̂_a(s)‖₁ ≤ β_{s,a} } with

    β_{s,a} = sqrt( (2 / n0) · ln( R · (2^k − 2) / δ ) ),   k = |K_{s,a}|,

R the number of stochastic rows. Under the committed budget, with probability ≥ 1 − δ every
(non-vacuous) set contains its true row, all rows at once (Azuma–Hoeffding per subset A ⊆ K plus a
union bound over the 2^k − 2 nontrivial subsets and the R rows). Vacuous rows use the whole simplex
(radius ∞), deterministic rows radius 0. Prop. 2: a declared Markov tolerance η enlarges every
radius to β + η.

σ(C; V) = max_{q ∈ C} ⟨q, V⟩ is solved in closed form: sort K by V, move
ξ = min(β/2, 1 − q_top) onto the highest-V entry and take it from the lowest-V entries in order.
Vectorised over any leading batch shape; padded entries (``valid`` False) carry no mass and never
receive any.

Anytime sets (:func:`anytime_beta`, ``anytime = true`` / ``--anytime``): every logged visit n of
the row is used, P̂ = N(s,a,·)/n, with radius β_any(n) = 2 d(n), d the stitched time-uniform
Hoeffding boundary of :mod:`safecert.stats.anytime` at ln(R (2^k − 2)/δ). With probability
≥ 1 − δ every true row lies in its set at *every* log size simultaneously, so a certificate may be
recomputed whenever the logs grow, with no budget committed in advance.
"""

from __future__ import annotations

import numpy as np

from safecert.stats.anytime import anytime_deviation

NETWORK_MAX_K = 6


def beta(n0: np.ndarray, k: np.ndarray, rows: int, delta: float) -> np.ndarray:
    """Radius β per row (0 where k == 1, ∞ where n0 == 0 on a stochastic row).

    ``ln(2^k − 2)`` is evaluated as ``k ln 2 + log1p(−2^{1−k})`` so large K do not overflow.
    """
    n0 = np.asarray(n0, dtype=np.float64)
    k = np.asarray(k, dtype=np.int64)
    log_term = _log_union(k, rows, delta)
    with np.errstate(divide="ignore"):
        radius = np.sqrt(2.0 * log_term / n0)
    radius = np.where(n0 > 0, radius, np.inf)
    return np.where(k <= 1, 0.0, radius)


def _log_union(k: np.ndarray, rows: int, delta: float) -> np.ndarray:
    """ln(R (2^k − 2) / δ): the share of δ of one (row, subset) pair."""
    kk = np.maximum(k, 2).astype(np.float64)
    log_subsets = kk * np.log(2.0) + np.log1p(-np.exp2(1.0 - kk))
    return np.log(max(rows, 1)) + log_subsets - np.log(delta)


def anytime_beta(visits: np.ndarray, k: np.ndarray, rows: int, delta: float) -> np.ndarray:
    """Anytime radius per row: 2 d(n) with d the stitched boundary at ln(R (2^k − 2)/δ), n = every
    visit of the row (0 where k == 1, ∞ on a stochastic row never visited).

    Why: for each of the 2^k − 2 nontrivial subsets A ⊂ K, the visits' indicators of A minus P(A)
    form a martingale (A1, A4, whatever controller logged them), so P̂_n(A) − P(A) < d(n) for every
    n at once with probability ≥ 1 − δ/(R (2^k − 2)); on the union of these events
    ‖P − P̂_n‖₁ = 2 max_A (P̂_n(A) − P(A)) < 2 d(n) for every row and every n.
    """
    visits = np.asarray(visits, dtype=np.float64)
    k = np.asarray(k, dtype=np.int64)
    radius = 2.0 * anytime_deviation(visits, _log_union(k, rows, delta))
    return np.where(k <= 1, 0.0, radius)


def inner_max(
    values: np.ndarray, p_hat: np.ndarray, radius: np.ndarray, valid: np.ndarray | None = None
) -> np.ndarray:
    """σ(C; V) for a batch of rows.

    ``values``/``p_hat``/``valid``: (..., k) — V ≥ 0 on K(s,a), P̂ on K(s,a) (its shape may be a
    trailing part of V's: rows shared by a batch of value vectors), which entries are
    real (None: all; padding with V = 0 and P̂ = 0 is harmless either way); ``radius``: (...) —
    β (+η); ∞ means vacuous (σ = max over real V). Returns (...,): the exact optimum of the LP
    (Prop. 1), O(k log k) per row.
    """
    if valid is None and values.shape[-1] <= NETWORK_MAX_K:
        cols = np.moveaxis(values, -1, 0)
        return inner_max_columns(
            [cols[j] for j in range(len(cols))],
            [p_hat[..., j] for j in range(len(cols))],
            radius,
        )
    vs, ps, _ = _sorted(values, p_hat, valid)
    xi, take = _transfer(ps, radius)
    return (
        np.einsum("...k,...k->...", ps, vs)
        + xi * vs[..., -1]
        - np.einsum("...k,...k->...", take, vs[..., :-1])
    )


def inner_max_columns(v: list[np.ndarray], p: list[np.ndarray], radius: np.ndarray) -> np.ndarray:
    """σ(C; V) with the k entries given as k broadcast-compatible column arrays (small k).

    Same optimum as the sort-based path: an odd–even transposition sorting network (k rounds of
    adjacent compare–exchanges, stable) carries P̂ along with V column by column — no per-row sort,
    so short rows in large batches cost a few vector operations. Padding with V = 0, P̂ = 0 is
    harmless; V must be ≥ 0.
    """
    v, p = list(v), list(p)
    k = len(v)
    for rnd in range(k):
        for i in range(rnd % 2, k - 1, 2):
            swap = v[i] > v[i + 1]
            v[i], v[i + 1] = np.minimum(v[i], v[i + 1]), np.maximum(v[i], v[i + 1])
            p[i], p[i + 1] = np.where(swap, p[i + 1], p[i]), np.where(swap, p[i], p[i + 1])
    xi = np.maximum(np.minimum(np.asarray(radius) / 2.0, 1.0 - p[-1]), 0.0)
    sigma = xi * v[-1]
    below = p[0]  # mass of the entries below j; the first take is min(ξ, p_0) (ξ ≥ 0, exact)
    for j in range(k):
        sigma = sigma + p[j] * v[j]
        if j == 0 and k > 1:
            sigma = sigma - np.minimum(xi, p[0]) * v[0]
        elif j < k - 1:
            sigma = sigma - np.minimum(np.maximum(xi - below, 0.0), p[j]) * v[j]
            below = below + p[j]
    return sigma


def worst_distribution(
    values: np.ndarray, p_hat: np.ndarray, radius: np.ndarray, valid: np.ndarray | None = None
) -> np.ndarray:
    """The maximiser q* of σ(C; V) (same shape as ``p_hat``); for tests and adversaries."""
    _, ps, order = _sorted(values, p_hat, valid)
    xi, take = _transfer(ps, radius)
    qs = np.concatenate([ps[..., :-1] - take, ps[..., -1:] + xi[..., None]], axis=-1)
    q = np.empty_like(qs)
    np.put_along_axis(q, order, qs, axis=-1)
    return q


def _sorted(
    values: np.ndarray, p_hat: np.ndarray, valid: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """V and P̂ sorted by V ascending (the top entry last); padding sorts first with V = −1."""
    if valid is not None:
        values = np.where(valid, values, -1.0)
        p_hat = np.where(valid, p_hat, 0.0)
    order = np.argsort(values, axis=-1, kind="stable")
    # flat gathers (several times faster than take_along_axis on many short rows); P̂ may have
    # fewer leading (batch) dimensions than V and is then gathered without being broadcast
    k = values.shape[-1]
    flat_v = order + (np.arange(order.size // k) * k).reshape(order.shape[:-1] + (1,))
    p_hat = np.ascontiguousarray(p_hat)
    flat_p = order + (np.arange(p_hat.size // k) * k).reshape(p_hat.shape[:-1] + (1,))
    return (
        np.ascontiguousarray(values).reshape(-1)[flat_v],
        p_hat.reshape(-1)[flat_p],
        order,
    )


def _transfer(ps: np.ndarray, radius: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ξ moved onto the top entry (≤ β/2 and ≤ its capacity 1 − p_top = the others' mass), and
    the amount taken from each other entry, lowest V first."""
    xi = np.maximum(np.minimum(np.asarray(radius) / 2.0, 1.0 - ps[..., -1]), 0.0)
    donors = ps[..., :-1]
    below = np.cumsum(donors, axis=-1) - donors  # mass of strictly lower entries
    return xi, np.clip(xi[..., None] - below, 0.0, donors)
