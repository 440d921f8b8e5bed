"""Float64 replay of MILP witnesses through the real networks and dynamics.

The MILP encodes a Bayesian layer by the *interval* of pre-activations the weight box allows, not by
explicit weights. :func:`realise_weights` turns a witness back into concrete weights: layer by layer
it recomputes the float64 input ``a`` of the layer with the weights chosen so far, and for each
neuron picks the convex combination ``W = (1 − λ) W_min + λ W_max`` of the two extreme weight
columns for that input (``W_min = w_lo`` where ``a ≥ 0``, ``w_hi`` where ``a < 0``; the other way
round for ``W_max``) that reproduces the MILP's pre-activation; ``λ`` is clipped to [0, 1], so the
weights are always inside the box. The caller then re-evaluates its condition in float64:
a witness that does not hold there is **not** a counterexample (``ReplayReport.ok`` is False).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from safecert.bnn.dynamics import System
from safecert.bnn.networks import Layer, ReluNetwork, forward
from safecert.bnn.sets import Box, Polytope
from safecert.bnn.spec import WeightBox


@dataclass(frozen=True)
class ReplayReport:
    """Outcome of a float64 replay: ``ok`` when the condition is violated by real values."""

    ok: bool
    detail: str
    x: np.ndarray
    x_next: np.ndarray | None = None
    g_x: float | None = None
    g_next: float | None = None
    weights: list[Layer] | None = field(default=None, repr=False)


def realise_weights(box: WeightBox, x: np.ndarray, targets: Sequence[np.ndarray]) -> list[Layer]:
    """Concrete weights in ``box`` whose pre-activations at ``x`` follow ``targets`` (layer by layer)."""
    a = np.asarray(x, dtype=np.float64)
    out: list[Layer] = []
    last = len(box.lower) - 1
    for k, ((wl, bl), (wu, bu)) in enumerate(zip(box.lower, box.upper, strict=True)):
        pos = (a >= 0.0)[:, None]
        w_min, w_max = np.where(pos, wl, wu), np.where(pos, wu, wl)
        z_min, z_max = a @ w_min + bl, a @ w_max + bu
        width = z_max - z_min
        lam = np.clip(
            np.divide(targets[k] - z_min, width, out=np.zeros_like(width), where=width > 0),
            0.0,
            1.0,
        )
        # clipped: ``lo + 1·(hi − lo)`` can round one ulp past ``hi``, and the box check is exact
        w = np.clip(w_min + lam[None, :] * (w_max - w_min), wl, wu)
        b = np.clip(bl + lam * (bu - bl), bl, bu)
        out.append((w, b))
        a = a @ w + b
        if k < last:
            a = np.maximum(a, 0.0)
    return out


def snap_state(x: np.ndarray, box: Box, integer: bool, sets: Sequence[Polytope] = ()) -> np.ndarray:
    """Move a solver point (feasible up to tolerances) onto the exact constraint set: round integer
    states, clip to ``box``, and clamp coordinates constrained by single-variable rows of ``sets``."""
    x = np.asarray(x, dtype=np.float64).copy()
    if integer:
        x = np.round(x)
    for poly in sets:
        for a, b in zip(poly.A, poly.b, strict=True):
            nz = np.flatnonzero(a)
            if nz.size == 1:
                i = nz[0]
                bound = b / a[i]
                x[i] = min(x[i], bound) if a[i] > 0 else max(x[i], bound)
    return np.clip(x, box.lo, box.hi)


def replay_closure(
    bench: System, box: WeightBox, g: ReluNetwork, x: np.ndarray, targets: Sequence[np.ndarray]
) -> ReplayReport:
    """Is ``x ∈ Inv`` with weights in ``box`` sending ``x' = f(x, π_w(x))`` outside ``Inv``?"""
    x = snap_state(x, bench.step_box, bench.integer)
    weights = realise_weights(box, x, targets)
    if not box.contains(weights):
        return ReplayReport(False, "realised weights left the box", x, weights=weights)
    x_next = bench.step(x, forward(weights, x))
    g_x, g_next = float(g.forward(x)[0]), float(g.forward(x_next)[0])
    left = not bool(bench.in_box(x_next))
    ok = g_x >= 0.0 and (g_next < 0.0 or left)
    detail = f"g(x) = {g_x:.6g}, g(x') = {g_next:.6g}" + (", x' outside the box" if left else "")
    return ReplayReport(ok, detail, x, x_next, g_x, g_next, weights)


def replay_initial(bench: System, g: ReluNetwork, x: np.ndarray, piece: int) -> ReplayReport:
    """Is ``x ∈ X0`` (piece ``piece``) with ``g(x) < 0``?"""
    p = bench.initial.pieces[piece]
    x = snap_state(x, p.box, bench.integer, [p.rows])
    g_x = float(g.forward(x)[0])
    ok = bool(bench.in_initial(x)) and bool(bench.in_box(x)) and g_x < 0.0
    return ReplayReport(ok, f"x ∈ X0, g(x) = {g_x:.6g}", x, g_x=g_x)


def replay_unsafe(bench: System, g: ReluNetwork, x: np.ndarray, piece: int) -> ReplayReport:
    """Is ``x ∈ X_u ∩ B`` (piece ``piece``) with ``g(x) ≥ 0``?"""
    p = bench.unsafe.pieces[piece]
    x = snap_state(x, p.box, bench.integer, [p.rows])
    g_x = float(g.forward(x)[0])
    ok = bool(bench.in_unsafe(x)) and bool(bench.in_box(x)) and g_x >= 0.0
    return ReplayReport(ok, f"x ∈ X_u, g(x) = {g_x:.6g}", x, g_x=g_x)


def replay_output(
    box: WeightBox, x: np.ndarray, targets: Sequence[np.ndarray], in_box: Box, unsafe_out: Polytope
) -> ReplayReport:
    """Problem 1: does some weight in ``box`` map ``x ∈ in_box`` into ``unsafe_out``?"""
    x = np.clip(np.asarray(x, dtype=np.float64), in_box.lo, in_box.hi)
    weights = realise_weights(box, x, targets)
    y = forward(weights, x)
    ok = bool(unsafe_out.contains(y)) and box.contains(weights)
    return ReplayReport(
        ok, f"π_w(x) = {np.array2string(y, precision=6)}", x, x_next=y, weights=weights
    )
