"""Exact MILP encodings of interval-weight ReLU networks and piecewise-linear maps (docs/methods.md).

Conventions: a :class:`Bounded` is a vector of :class:`~safecert.bnn.solvers.Milp` column indices
with sound bounds ``lo ≤ x ≤ hi`` (used as big-M constants). Every function here adds columns and
rows to a ``Milp`` and returns the ``Bounded`` of its result; each encoding is **exact**: the
projection of its feasible set onto (inputs, output) is the graph of the encoded map.

Interval-weight layer (Thm. 1, generalised): for ``w_ij ∈ [w_lo, w_hi]`` and an input ``x_i`` of
either sign, ``min_w w·x_i`` is ``w_lo·x_i`` when ``x_i ≥ 0`` and ``w_hi·x_i`` when ``x_i ≤ 0``.
Inputs whose bounds straddle 0 (and meet a non-degenerate weight) are split exactly,
``x = x_pos + x_neg`` with ``0 ≤ x_pos ≤ hi·s``, ``lo·(1 − s) ≤ x_neg ≤ 0``, ``s`` binary; then

    Σ_i (w_lo x_pos + w_hi x_neg) + b_lo ≤ z_j ≤ Σ_i (w_hi x_pos + w_lo x_neg) + b_hi,

which is exactly ``{x @ W + b : W, b in the box}`` for each neuron. Inputs known to be ≥ 0 (ReLU
outputs) or ≤ 0 need no split. ReLU: one binary per *unstable* neuron (``lo < 0 < hi``); stable
neurons are eliminated using the bounds (active: ``a = z``; inactive: ``a = 0``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from safecert.bnn.bounds import LayerBounds, interval_affine, lp_tighten, network_bounds, widen
from safecert.bnn.networks import ReluNetwork
from safecert.bnn.solvers import Milp
from safecert.bnn.spec import WeightBox


@dataclass(frozen=True)
class Bounded:
    """MILP columns ``idx`` with sound bounds ``lo ≤ x[idx] ≤ hi``."""

    idx: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    @property
    def size(self) -> int:
        return int(self.idx.size)

    def item(self, i: int) -> Bounded:
        return Bounded(self.idx[i : i + 1], self.lo[i : i + 1], self.hi[i : i + 1])

    @staticmethod
    def concat(parts: Sequence[Bounded]) -> Bounded:
        return Bounded(
            np.concatenate([p.idx for p in parts]),
            np.concatenate([p.lo for p in parts]),
            np.concatenate([p.hi for p in parts]),
        )

    def value(self, solution: np.ndarray) -> np.ndarray:
        return np.asarray(solution)[self.idx]


def new_vars(milp: Milp, lo: ArrayLike, hi: ArrayLike, integer: bool = False) -> Bounded:
    lo = np.atleast_1d(np.asarray(lo, dtype=np.float64))
    hi = np.atleast_1d(np.asarray(hi, dtype=np.float64))
    if integer:
        lo, hi = np.ceil(lo - 1e-9), np.floor(hi + 1e-9)
    return Bounded(milp.add_vars(lo, hi, integer), lo, hi)


def linear_combination(
    milp: Milp, s: Bounded, coef: np.ndarray, const: float = 0.0, integer: bool = False
) -> Bounded:
    """``y = coef · s + const`` as a new column (bounds by interval arithmetic)."""
    coef = np.asarray(coef, dtype=np.float64)
    lo = const + np.sum(np.minimum(coef * s.lo, coef * s.hi))
    hi = const + np.sum(np.maximum(coef * s.lo, coef * s.hi))
    lo, hi = widen(np.array([lo]), np.array([hi]))
    y = new_vars(milp, lo, hi, integer)
    milp.add_row(np.concatenate([y.idx, s.idx]), np.concatenate([[1.0], -coef]), const, const)
    return y


def relu(milp: Milp, z: Bounded) -> Bounded:
    """``a = max(z, 0)`` elementwise; binaries only for neurons with ``lo < 0 < hi``."""
    idx = z.idx.copy()
    lo = np.maximum(z.lo, 0.0)
    hi = np.maximum(z.hi, 0.0)
    for j in range(z.size):
        zl, zh = float(z.lo[j]), float(z.hi[j])
        if zl >= 0.0:
            continue
        if zh <= 0.0:
            idx[j] = milp.add_vars(np.zeros(1), np.zeros(1))[0]
            continue
        a, d = (
            milp.add_vars(np.array([0.0]), np.array([zh]))[0],
            milp.add_vars(np.zeros(1), np.ones(1), True)[0],
        )
        zi = int(z.idx[j])
        milp.add_row(np.array([a, zi]), np.array([1.0, -1.0]), lo=0.0)  # a ≥ z
        milp.add_row(np.array([a, zi, d]), np.array([1.0, -1.0, -zl]), hi=-zl)  # a ≤ z − lo(1 − d)
        milp.add_row(np.array([a, d]), np.array([1.0, -zh]), hi=0.0)  # a ≤ hi·d
        idx[j] = a
    return Bounded(idx, lo, hi)


def _sign_split(milp: Milp, x: Bounded, need: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Columns ``(pos, neg)`` with ``x = pos + neg``, ``pos ≥ 0 ≥ neg``, complementary; ``-1`` = absent."""
    pos = np.where(x.lo >= 0.0, x.idx, -1)
    neg = np.where((x.hi <= 0.0) & (x.lo < 0.0), x.idx, -1)
    for i in np.flatnonzero(need & (x.lo < 0.0) & (x.hi > 0.0)):
        lo, hi = float(x.lo[i]), float(x.hi[i])
        p = milp.add_vars(np.zeros(1), np.array([hi]))[0]
        n = milp.add_vars(np.array([lo]), np.zeros(1))[0]
        s = milp.add_vars(np.zeros(1), np.ones(1), True)[0]
        milp.add_row(np.array([p, n, x.idx[i]]), np.array([1.0, 1.0, -1.0]), 0.0, 0.0)
        milp.add_row(np.array([p, s]), np.array([1.0, -hi]), hi=0.0)  # pos ≤ hi·s
        milp.add_row(np.array([n, s]), np.array([1.0, lo]), lo=lo)  # neg ≥ lo·(1 − s)
        pos[i], neg[i] = p, n
    return pos, neg


def interval_layer(
    milp: Milp,
    x: Bounded,
    w_lo: np.ndarray,
    w_hi: np.ndarray,
    b_lo: np.ndarray,
    b_hi: np.ndarray,
    stable: LayerBounds | None = None,
) -> Bounded:
    """Pre-activations ``z = x @ W + b`` for every ``W ∈ [w_lo, w_hi]``, ``b ∈ [b_lo, b_hi]`` (exact);
    the column bounds are the interval ones, except where ``stable`` (sound bounds of ``z`` from
    elsewhere, e.g. :func:`~safecert.bnn.bounds.crown_bounds`) proves the sign of a neuron the
    interval bounds leave unstable: there its bound is taken from ``stable`` (no binary after the
    ReLU). Bounds that prove nothing are not used: a different big-M alone changes the solver's
    path, not its answer (benchmarks/RESULTS_bnn_scale.md)."""
    z_lo, z_hi = interval_affine(x.lo, x.hi, w_lo, w_hi, b_lo, b_hi)
    if stable is not None:
        straddle = (z_lo < 0.0) & (z_hi > 0.0)
        z_lo = np.where(straddle & (stable.z_lo >= 0.0), stable.z_lo, z_lo)
        z_hi = np.where(straddle & (stable.z_hi <= 0.0), stable.z_hi, z_hi)
    z = new_vars(milp, z_lo, z_hi)
    wide = w_lo < w_hi  # (in, out)
    pos, neg = _sign_split(milp, x, np.asarray(wide.any(axis=1)))
    for j in range(z.size):
        fixed = ~wide[:, j]
        if not wide[:, j].any() and b_lo[j] == b_hi[j]:
            milp.add_row(
                np.concatenate([[z.idx[j]], x.idx]),
                np.concatenate([[1.0], -w_lo[:, j]]),
                b_lo[j],
                b_lo[j],
            )
            continue
        # fixed-weight inputs enter directly; interval-weight inputs through their sign parts
        f_idx, f_coef = x.idx[fixed], w_lo[fixed, j]
        iv = np.flatnonzero(~fixed)
        p_ok, n_ok = iv[pos[iv] >= 0], iv[neg[iv] >= 0]
        lower_idx = np.concatenate([[z.idx[j]], f_idx, pos[p_ok], neg[n_ok]])
        lower_coef = np.concatenate([[1.0], -f_coef, -w_lo[p_ok, j], -w_hi[n_ok, j]])
        upper_coef = np.concatenate([[1.0], -f_coef, -w_hi[p_ok, j], -w_lo[n_ok, j]])
        milp.add_row(lower_idx, lower_coef, lo=b_lo[j])
        milp.add_row(lower_idx, upper_coef, hi=b_hi[j])
    return z


def tighten_columns(
    milp: Milp, x: Bounded, *, only_straddling: bool = True, integer: bool = False
) -> Bounded:
    """LP-tighten the bounds of ``x`` in place (see :func:`~safecert.bnn.bounds.lp_tighten`);
    integer columns are rounded inward."""
    lo, hi = lp_tighten(milp, x.idx, x.lo, x.hi, only_straddling=only_straddling)
    if integer:
        lo, hi = np.ceil(lo - 1e-6), np.floor(hi + 1e-6)
    lo, hi = np.maximum(lo, x.lo), np.minimum(hi, x.hi)
    for j in np.flatnonzero((lo > x.lo) | (hi < x.hi)):
        milp.lb[int(x.idx[j])], milp.ub[int(x.idx[j])] = float(lo[j]), float(hi[j])
    return Bounded(x.idx, lo, hi)


@dataclass(frozen=True)
class NetworkEncoding:
    """Columns of one encoded network: ``inputs``, ``pre[k]`` (layer k's z), ``out`` (= ``pre[-1]``)."""

    inputs: Bounded
    pre: tuple[Bounded, ...]

    @property
    def out(self) -> Bounded:
        return self.pre[-1]


def encode_network(
    milp: Milp, net: ReluNetwork | WeightBox, x: Bounded, *, tighten: bool = False
) -> NetworkEncoding:
    """Encode ``out = net_W(x)`` for all ``W`` in the box (a plain network is a one-point box).

    Every hidden neuron that the CROWN-style bounds over the input box
    (:func:`~safecert.bnn.bounds.network_bounds`) prove stable is pruned (no binary); other bounds
    stay the interval ones (:func:`interval_layer`). With ``tighten``, each hidden layer's
    unstable pre-activation bounds are then tightened by the LP relaxation of everything encoded
    so far before its ReLU.
    """
    box = net if isinstance(net, WeightBox) else WeightBox.point(net)
    known = network_bounds(box, x.lo, x.hi)
    pre: list[Bounded] = []
    a = x
    last = len(box.lower) - 1
    for k, ((wl, bl), (wu, bu)) in enumerate(zip(box.lower, box.upper, strict=True)):
        z = interval_layer(milp, a, wl, wu, bl, bu, known[k] if k < last else None)
        if k < last and tighten:
            z = tighten_columns(milp, z)
        pre.append(z)
        if k < last:
            a = relu(milp, z)
    return NetworkEncoding(x, tuple(pre))


def piecewise_linear(
    milp: Milp,
    x: Bounded,
    f: Callable[[np.ndarray], np.ndarray],
    kinks: Sequence[float],
    integer: bool = False,
) -> Bounded:
    """``y = f(x)`` for a continuous ``f`` that is linear between consecutive ``kinks`` and beyond
    the outermost ones (``kinks`` must list every kink of ``f`` near ``[lo, hi]``):
    ``y = f(lo) + s_0 (x − lo) + Σ_{c ∈ (lo, hi)} Δs_c · ReLU(x − c)``."""
    lo, hi = float(x.lo[0]), float(x.hi[0])
    ks = np.sort(np.asarray(kinks, dtype=np.float64))
    pts = np.concatenate([[ks[0] - 1.0], ks, [ks[-1] + 1.0]]) if ks.size else np.array([0.0, 1.0])
    fv = np.asarray(f(pts), dtype=np.float64)
    slopes = np.diff(fv) / np.diff(pts)  # slope of each segment between consecutive pts

    def seg(v: float) -> int:
        return int(np.clip(np.searchsorted(pts, v, side="right") - 1, 0, slopes.size - 1))

    inner = [c for c in ks if lo < c < hi]
    parts = [x]
    coef = [slopes[seg(lo)]]
    for c in inner:
        shifted = linear_combination(milp, x, np.array([1.0]), const=-c)
        parts.append(relu(milp, shifted))
        i = int(np.searchsorted(pts, c))
        coef.append(slopes[i] - slopes[i - 1])
    f_lo = float(np.asarray(f(np.array([lo])))[0])
    y = linear_combination(
        milp, Bounded.concat(parts), np.array(coef), const=f_lo - coef[0] * lo, integer=integer
    )
    f_range = np.asarray(f(np.array([lo, hi, *inner])), dtype=np.float64)
    y_lo, y_hi = widen(np.array([f_range.min()]), np.array([f_range.max()]))
    if integer:
        y_lo, y_hi = np.ceil(y_lo - 1e-9), np.floor(y_hi + 1e-9)
    j = int(y.idx[0])
    milp.lb[j], milp.ub[j] = max(milp.lb[j], float(y_lo[0])), min(milp.ub[j], float(y_hi[0]))
    return Bounded(y.idx, np.array([milp.lb[j]]), np.array([milp.ub[j]]))


def argmax_onehot(milp: Milp, y: Bounded, gap: float = 0.0) -> Bounded:
    """Binaries ``b`` with ``Σ b = 1`` and ``b_k = 1 ⇒ y_k ≥ y_j + gap`` for all ``j ≠ k``.

    ``gap = 0``: some maximiser (ties admit every maximiser — a superset of numpy's first-index
    rule, hence sound for proofs). ``gap > 0``: a strict winner by ``gap`` (witnesses that replay
    in float64 under any tie-breaking rule; used for the strict re-ask only)."""
    m = y.size
    b = new_vars(milp, np.zeros(m), np.ones(m), integer=True)
    milp.add_row(b.idx, np.ones(m), 1.0, 1.0)
    for k in range(m):
        for j in range(m):
            big = float(y.hi[j] - y.lo[k])
            if j == k or big <= -gap:
                continue
            # y_k − y_j ≥ gap − (big + gap)·(1 − b_k)
            milp.add_row(
                np.array([y.idx[k], y.idx[j], b.idx[k]]),
                np.array([1.0, -1.0, -(big + gap)]),
                lo=-big,
            )
    return b


def state_vars(milp: Milp, lo: ArrayLike, hi: ArrayLike, integer: bool = False) -> Bounded:
    """Free input columns ranging over a box (integer points when ``integer``)."""
    return new_vars(milp, lo, hi, integer)
