"""Sound bounds on ReLU-network pre-activations over a state box × a weight box.

:func:`interval_affine` bounds ``z_j = Σ_i w_ij x_i + b_j`` for every ``w_ij ∈ [w_lo, w_hi]``,
``b_j ∈ [b_lo, b_hi]`` and ``x_i ∈ [x_lo, x_hi]`` of **either sign** by exact interval products
``[w_lo, w_hi]·[x_lo, x_hi] = [min, max]`` of the four endpoint products — valid in every layer,
not only where inputs are non-negative (the paper's assumption beyond layer 1).
:func:`network_bounds` chains it through the ReLUs. Bounds are widened outward by a relative
``PAD`` so that floating-point rounding never makes them too tight to be sound big-M constants.

Tighter per-neuron bounds come from the LP relaxation of the partial MILP
(:func:`lp_tighten`, used by :mod:`safecert.bnn.encoding` when ``tighten=True``): the LP optimum over a
relaxation of the feasible set is a valid bound, so tightened big-M constants keep the encoding exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

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
    box: WeightBox, x_lo: Sequence[float], x_hi: Sequence[float]
) -> list[LayerBounds]:
    """Interval bounds of every layer's pre-activation for ``x ∈ [x_lo, x_hi]``, weights in ``box``."""
    lo = np.asarray(x_lo, dtype=np.float64)
    hi = np.asarray(x_hi, dtype=np.float64)
    out: list[LayerBounds] = []
    last = len(box.lower) - 1
    for k, ((wl, bl), (wu, bu)) in enumerate(zip(box.lower, box.upper, strict=True)):
        z_lo, z_hi = interval_affine(lo, hi, wl, wu, bl, bu)
        out.append(LayerBounds(z_lo, z_hi))
        if k < last:
            lo, hi = np.maximum(z_lo, 0.0), np.maximum(z_hi, 0.0)
    return out


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
