"""Sound bounds on ReLU-network pre-activations over a state box × a weight box.

:func:`interval_affine` bounds ``z_j = Σ_i w_ij x_i + b_j`` for every ``w_ij ∈ [w_lo, w_hi]``,
``b_j ∈ [b_lo, b_hi]`` and ``x_i ∈ [x_lo, x_hi]`` of **either sign** by exact interval products
``[w_lo, w_hi]·[x_lo, x_hi] = [min, max]`` of the four endpoint products — valid in every layer,
not only where inputs are non-negative (the paper's assumption beyond layer 1).
:func:`network_bounds` chains it through the ReLUs. Bounds are widened outward by a relative
``PAD`` so that floating-point rounding never makes them too tight to be sound big-M constants.

:func:`crown_bounds` tightens the layers after the first by a CROWN-style backward linear relaxation
written for interval weights (below); :func:`network_bounds` intersects both. Still tighter per-neuron
bounds come from the LP relaxation of the partial MILP
(:func:`lp_tighten`, used by :mod:`safecert.bnn.encoding` when ``tighten=True``): the LP optimum over a
relaxation of the feasible set is a valid bound, so tightened big-M constants keep the encoding exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from safecert.bnn.solvers import LpSession, Milp
from safecert.bnn.spec import WeightBox

PAD = 1e-9


def widen(lo: np.ndarray, hi: np.ndarray, rel: float = PAD) -> tuple[np.ndarray, np.ndarray]:
    """Outward padding ``rel·(1 + |v|)`` of an interval (absorbs rounding of the bound itself)."""
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    return lo - rel * (1.0 + np.abs(lo)), hi + rel * (1.0 + np.abs(hi))


def interval_product_sum(
    x_lo: np.ndarray, x_hi: np.ndarray, w_lo: np.ndarray, w_hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``[Σ_i min_{w,x} w_ij x_i, Σ_i max_{w,x} w_ij x_i]`` for ``x`` of shape (in,), ``w`` (in, out)."""
    xl, xh = np.asarray(x_lo)[:, None], np.asarray(x_hi)[:, None]
    corners = np.stack([w_lo * xl, w_lo * xh, w_hi * xl, w_hi * xh])
    return corners.min(axis=0).sum(axis=0), corners.max(axis=0).sum(axis=0)


def interval_affine(
    x_lo: np.ndarray,
    x_hi: np.ndarray,
    w_lo: np.ndarray,
    w_hi: np.ndarray,
    b_lo: np.ndarray,
    b_hi: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Sound bounds of ``x @ W + b`` over the boxes (padded outward)."""
    lo, hi = interval_product_sum(x_lo, x_hi, w_lo, w_hi)
    return widen(lo + b_lo, hi + b_hi)


@dataclass(frozen=True)
class LayerBounds:
    """Bounds of one layer's pre-activation ``z`` (post-activation is ``ReLU`` of them, except last)."""

    z_lo: np.ndarray
    z_hi: np.ndarray

    @property
    def stable_active(self) -> np.ndarray:
        return self.z_lo >= 0.0

    @property
    def stable_inactive(self) -> np.ndarray:
        return self.z_hi <= 0.0

    @property
    def unstable(self) -> np.ndarray:
        return (self.z_lo < 0.0) & (self.z_hi > 0.0)


def network_bounds(
    box: WeightBox, x_lo: ArrayLike, x_hi: ArrayLike, *, crown: bool = True
) -> list[LayerBounds]:
    """Bounds of every layer's pre-activation for ``x ∈ [x_lo, x_hi]``, weights in ``box``:
    interval propagation, intersected with :func:`crown_bounds` when ``crown`` (each is sound, so
    their intersection is)."""
    lo = np.asarray(x_lo, dtype=np.float64)
    hi = np.asarray(x_hi, dtype=np.float64)
    out: list[LayerBounds] = []
    last = len(box.lower) - 1
    for k, ((wl, bl), (wu, bu)) in enumerate(zip(box.lower, box.upper, strict=True)):
        z_lo, z_hi = interval_affine(lo, hi, wl, wu, bl, bu)
        if crown and k > 0:
            c_lo, c_hi = _crown_layer(box, out, np.asarray(x_lo), np.asarray(x_hi), k)
            z_lo, z_hi = np.maximum(z_lo, c_lo), np.minimum(z_hi, c_hi)
        out.append(LayerBounds(z_lo, z_hi))
        if k < last:
            lo, hi = np.maximum(z_lo, 0.0), np.maximum(z_hi, 0.0)
    return out


def crown_bounds(box: WeightBox, x_lo: ArrayLike, x_hi: ArrayLike) -> list[LayerBounds]:
    """CROWN-style bounds of every layer's pre-activation over ``x ∈ [x_lo, x_hi]`` and every
    weight of ``box`` (the weights may be chosen anew for every input: the bound holds for the
    whole set ``{net_W(x)}``).

    For a layer ``k > 0`` and a row ``Λ`` of coefficients (``±e_j``: neuron ``j``'s lower or upper
    bound), ``Λ·z_k`` is bounded below by a backward pass (Zhang et al. 2018, generalised):

    * through an interval-weight layer whose inputs ``a ≥ 0`` (ReLU outputs):
      ``min_W Λ·(W a + b) = (Λ⁺ W_lo + Λ⁻ W_hi) a + Λ⁺ b_lo + Λ⁻ b_hi`` exactly, entry by entry,
      because ``a ≥ 0`` fixes the minimising end of every weight by the sign of ``Λ_j``;
    * through a ReLU ``a = max(z, 0)`` with bounds ``l < 0 < u`` (from the layers before): a
      coefficient ``c ≥ 0`` uses ``a ≥ α z`` (``α = 1`` if ``u ≥ −l`` else ``0``), ``c < 0`` uses
      ``a ≤ u (z − l) / (u − l)``; stable neurons pass (``a = z``) or drop (``a = 0``);
    * at the first layer, whose inputs ``x`` may have either sign, the remaining
      ``min_{W, x} Σ_j Λ'_j (W x + b)_j`` is taken exactly per input: the coefficient of ``x_i``
      is ``Λ'⁺ W_lo + Λ'⁻ W_hi`` where ``x_i ≥ 0`` and ``Λ'⁺ W_hi + Λ'⁻ W_lo`` where ``x_i ≤ 0``,
      a piecewise-linear function of ``x_i`` minimised at ``x_lo``, ``x_hi`` or ``0``.

    Upper bounds are ``−`` the lower bound of ``−Λ``. The first layer gets interval bounds (exact
    there). Results are padded outward like :func:`interval_affine`. Sound for every weight in
    the box and every input in the box; tested against dense sampling and the exact MILP.
    """
    lo = np.asarray(x_lo, dtype=np.float64)
    hi = np.asarray(x_hi, dtype=np.float64)
    out: list[LayerBounds] = []
    for k in range(len(box.lower)):
        if k == 0:
            (wl, bl), (wu, bu) = box.lower[0], box.upper[0]
            out.append(LayerBounds(*interval_affine(lo, hi, wl, wu, bl, bu)))
        else:
            out.append(LayerBounds(*_crown_layer(box, out, lo, hi, k)))
    return out


def _crown_layer(
    box: WeightBox, before: Sequence[LayerBounds], x_lo: np.ndarray, x_hi: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds of layer ``k``'s pre-activation (``k ≥ 1``), given the bounds of
    the layers before it (:func:`crown_bounds`)."""
    n = box.lower[k][0].shape[1]
    rows = np.vstack([np.eye(n), -np.eye(n)])  # lower bounds of z_j and of −z_j
    low = _crown_lower(box, before, x_lo, x_hi, k, rows)
    lo, hi = low[:n], -low[n:]
    return widen(lo, hi, 1e-9)


def _crown_lower(
    box: WeightBox,
    before: Sequence[LayerBounds],
    x_lo: np.ndarray,
    x_hi: np.ndarray,
    k: int,
    lam: np.ndarray,
) -> np.ndarray:
    """``min Λ_r · z_k`` for each row ``r`` of ``lam`` (backward pass of :func:`crown_bounds`)."""
    const = np.zeros(lam.shape[0])
    for layer in range(k, 0, -1):
        (wl, bl), (wu, bu) = box.lower[layer], box.upper[layer]
        pos, neg = np.maximum(lam, 0.0), np.minimum(lam, 0.0)
        const += pos @ bl + neg @ bu
        lam = pos @ wl.T + neg @ wu.T  # coefficients of a_{layer-1} ≥ 0
        zl, zu = before[layer - 1].z_lo, before[layer - 1].z_hi
        active, unstable = zl >= 0.0, (zl < 0.0) & (zu > 0.0)
        span = np.where(unstable, zu - zl, 1.0)
        slope = np.where(unstable, zu / span, 0.0)  # upper relaxation a ≤ slope (z − zl)
        alpha = np.where(unstable & (zu >= -zl), 1.0, 0.0)  # lower relaxation a ≥ alpha z
        coef_pos = np.where(active, 1.0, alpha)
        coef_neg = np.where(active, 1.0, slope)
        const += np.minimum(lam, 0.0) @ np.where(unstable, -slope * zl, 0.0)
        lam = np.maximum(lam, 0.0) * coef_pos + np.minimum(lam, 0.0) * coef_neg
    (wl, bl), (wu, bu) = box.lower[0], box.upper[0]
    pos, neg = np.maximum(lam, 0.0), np.minimum(lam, 0.0)
    const += pos @ bl + neg @ bu
    c_pos = pos @ wl.T + neg @ wu.T  # coefficient of x_i where x_i ≥ 0
    c_neg = pos @ wu.T + neg @ wl.T  # coefficient of x_i where x_i ≤ 0
    at_lo = np.where(x_lo >= 0.0, c_pos, c_neg) * x_lo
    at_hi = np.where(x_hi >= 0.0, c_pos, c_neg) * x_hi
    zero = np.where((x_lo <= 0.0) & (x_hi >= 0.0), 0.0, np.inf)
    return const + np.minimum(np.minimum(at_lo, at_hi), zero).sum(axis=1)


def lp_tighten(
    milp: Milp, idx: np.ndarray, lo: np.ndarray, hi: np.ndarray, *, only_straddling: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Tighten ``lo ≤ x[idx] ≤ hi`` by the LP relaxation of ``milp`` (min and max of each column).

    By default only columns whose interval straddles 0 are tightened (ReLU inputs: only those
    carry big-M constants); ``only_straddling=False`` tightens every column (e.g. successor states).
    Results are padded by ``1e-7·(1 + |v|)`` for the LP tolerance and intersected with the input
    bounds, so the returned bounds are never looser and, up to that tolerance, always valid.
    """
    lo = np.array(lo, dtype=np.float64)
    hi = np.array(hi, dtype=np.float64)
    todo = np.flatnonzero((lo < 0.0) & (hi > 0.0)) if only_straddling else np.flatnonzero(lo < hi)
    if todo.size == 0:
        return lo, hi
    session = LpSession(milp)
    for j in todo:
        v_lo = session.optimum(int(idx[j]), maximize=False)
        v_hi = session.optimum(int(idx[j]), maximize=True)
        if v_lo is not None:
            lo[j] = max(lo[j], widen(np.array(v_lo), np.array(v_lo), 1e-7)[0])
        if v_hi is not None:
            hi[j] = min(hi[j], widen(np.array(v_hi), np.array(v_hi), 1e-7)[1])
    return lo, hi
