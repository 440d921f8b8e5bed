"""Witnesses that no positive invariant exists at ε: an unsafe trajectory with weights in ``W_ε``.

The verifier proves ``Inv ⊇ X0`` closed under *every* transition ``x' = f(x, π_w(x))`` with
``w ∈ W_ε`` — the weights may differ at every step — and ``Inv`` disjoint from ``X_u``, inside the
box ``B``. So one trajectory ``x_0 ∈ X0, x_1, …, x_T`` with ``x_T ∈ X_u`` or ``x_T ∉ B``, every
``x_t`` (``t < T``) in the step box and concrete weights ``w_t ∈ W_ε`` at every step, shows that no
positive invariant exists at this ε: ``x_0`` lies in every candidate and closure carries it into
``X_u``. The same trajectory refutes every larger ε (the boxes are nested). That is what
:func:`replay_witness` checks, in float64 with the engine's own simulator and the exact box test
(``WeightBox.contains``, no tolerance); nothing else here is evidence.

:func:`find_witness` searches for one by differential evolution over the start ``x_0`` (X0's
bounding box; a start outside X0 is never reported) and one position ``λ_t ∈ [0, 1]`` per step on the
segment between two corner networks of the box (:func:`corner_networks`), maximising how far the
rollout gets into ``X_u`` or out of ``B``. When the policy's Bayesian layers see only
non-negative inputs (a deterministic first layer and ReLU), with at most two Bayesian layers and
one output, the two corners give the least and the greatest action the box allows at every
state, so the segment covers every action the box can produce; otherwise the search is a
heuristic. Either way it is incomplete: finding nothing proves nothing. Deterministic given the
generator; its cost is set in rollouts (``evals``), not seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from safecert.bnn.dynamics import System
from safecert.bnn.networks import Layer, forward
from safecert.bnn.sampling import BatchedLayers, batched_forward
from safecert.bnn.spec import WeightBox

#: how the reason of an attempt ended by a witness begins
NO_INVARIANT = "no positive invariant exists"


@dataclass(frozen=True)
class Witness:
    """A replayed unsafe trajectory: states ``path[0] ∈ X0 … path[-1]`` (in ``X_u`` or out of
    ``B``) and the weights of each step, all inside the box."""

    path: tuple[np.ndarray, ...]
    weights: tuple[tuple[Layer, ...], ...]
    leaves_box: bool

    def describe(self) -> str:
        end = "leaves the box" if self.leaves_box else "reaches X_u"
        states = " → ".join("(" + ", ".join(f"{v:.4g}" for v in x) + ")" for x in self.path)
        return (
            f"{NO_INVARIANT}: {states} {end} in {len(self.weights)} "
            f"step{'' if len(self.weights) == 1 else 's'} with "
            "weights in the box at every step (replayed in float64)"
        )


def replay_witness(
    bench: System, box: WeightBox, x0: np.ndarray, weights: Sequence[Sequence[Layer]]
) -> Witness | None:
    """The trajectory from ``x0`` under ``weights`` (one network per step), cut at its first state
    in ``X_u`` or outside ``B``, when it is a witness (module docstring); else None."""
    x = np.asarray(x0, dtype=np.float64).reshape(-1)
    if not (bool(bench.in_initial(x)) and bool(bench.in_box(x))):
        return None
    path = [x]
    for t, w in enumerate(weights):
        if not box.contains(w) or not bool(bench.step_box.contains(x)):
            return None
        x = bench.step(x[None], forward(w, x[None]))[0]
        path.append(x)
        out = not bool(bench.in_box(x))
        if out or bool(bench.in_unsafe(x)):
            steps = tuple(tuple(layer for layer in w_t) for w_t in weights[: t + 1])
            return Witness(tuple(path), steps, out)
    return None


def corner_networks(box: WeightBox) -> tuple[list[Layer], list[Layer]]:
    """``(W_lo, W_hi)``: two vertices of the box chosen by a sign rule, layer by layer from the
    output back — each entry at the end that pushes the (first) output down (``W_lo``) or up
    (``W_hi``) given the signs chosen above it. Exact extremes of the output under the condition
    of the module docstring; vertices of the box in any case."""
    n = len(box.lower)
    lo: list[Layer] = []
    hi: list[Layer] = []
    up_hi = np.ones(box.mean.layers[-1][0].shape[1], dtype=bool)
    up_lo = ~up_hi
    for k in range(n - 1, -1, -1):
        (wl, bl), (wu, bu) = box.lower[k], box.upper[k]
        w_hi, b_hi = np.where(up_hi[None, :], wu, wl), np.where(up_hi, bu, bl)
        w_lo, b_lo = np.where(up_lo[None, :], wu, wl), np.where(up_lo, bu, bl)
        hi.insert(0, (w_hi, b_hi))
        lo.insert(0, (w_lo, b_lo))
        # a unit of the layer below pushes the output up when its chosen weights do, on balance
        up_hi = (w_hi @ np.where(up_hi, 1.0, -1.0)) >= 0
        up_lo = (w_lo @ np.where(up_lo, 1.0, -1.0)) >= 0
    return lo, hi


def segment_networks(
    box: WeightBox, lo: list[Layer], hi: list[Layer], lam: np.ndarray
) -> BatchedLayers:
    """One network ``W_lo + λ_j (W_hi − W_lo)`` per entry of ``lam``, clipped into the box (the
    segment lies in it; the clip only removes rounding)."""
    out: BatchedLayers = []
    for (wa, ba), (wb, bb), (wl, bl), (wu, bu) in zip(lo, hi, box.lower, box.upper, strict=True):
        w = wa[None] + lam[:, None, None] * (wb - wa)[None]
        b = ba[None] + lam[:, None] * (bb - ba)[None]
        out.append((np.clip(w, wl, wu), np.clip(b, bl, bu)))
    return out


def danger(bench: System, x: np.ndarray) -> np.ndarray:
    """How far each state is into ``X_u`` or out of ``B``, in units of B's half-widths: ``≥ 0``
    on ``X_u`` and outside ``B``, the (negative) distance to the nearer of them inside. A guide
    for the search only."""
    half = (bench.box.hi - bench.box.lo) / 2.0
    z = np.asarray(x, dtype=np.float64)
    out = np.max(np.maximum(bench.box.lo - z, z - bench.box.hi) / half, axis=-1)
    for piece in bench.unsafe.pieces:
        depth = np.min(np.minimum(z - piece.box.lo, piece.box.hi - z) / half, axis=-1)
        if len(piece.rows.b):
            a = piece.rows.A * half[None, :]  # the rows in half-width units
            slack = (piece.rows.b - z @ piece.rows.A.T) / np.linalg.norm(a, axis=1)
            depth = np.minimum(depth, np.min(slack, axis=-1))
        out = np.maximum(out, depth)
    return out


@dataclass(frozen=True)
class SegmentSearch:
    """The best point of :func:`search_segment`: the start, the network of each step (one point
    ``λ_t`` of the corner segment each), its score (the largest ``score`` along the rollout) and
    the rollouts evaluated."""

    x0: np.ndarray
    weights: list[list[Layer]]
    best: float
    rollouts: int


def search_segment(
    bench: System,
    box: WeightBox,
    rng: np.random.Generator,
    *,
    evals: int,
    horizon: int,
    block: int = 1,
    score: Callable[[np.ndarray], np.ndarray] | None = None,
    stop: Callable[[], bool] | None = None,
) -> SegmentSearch:
    """Differential evolution over the start (X0's first piece's box) and ``λ_1 … λ_horizon`` on
    the corner segment, each ``λ`` held for ``block`` steps (rollouts of ``horizon · block`` steps
    with the same number of unknowns), maximising the largest ``score`` (default :func:`danger`)
    of the states along the rollout, with about ``evals`` rollouts. Deterministic given ``rng``,
    unless ``stop()`` (asked after every generation: a time budget) ends it early."""
    from scipy.optimize import differential_evolution

    score = score if score is not None else (lambda x: danger(bench, x))
    lo, hi = corner_networks(box)
    start = bench.initial.pieces[0].box
    d = start.dim

    def objective(population: np.ndarray) -> np.ndarray:
        z = np.atleast_2d(population.T)
        x, worst = z[:, :d], np.full(len(z), -np.inf)
        for t in range(horizon):
            nets = segment_networks(box, lo, hi, z[:, d + t])
            for _ in range(block):
                x = bench.step(x, batched_forward(nets, x))
                worst = np.maximum(worst, score(x))
        return -worst

    bounds = list(zip(start.lo, start.hi, strict=True)) + [(0.0, 1.0)] * horizon
    popsize = 15
    init: str | np.ndarray = "latinhypercube"
    if block > 1:  # long rollouts: seed the constant pushes (every λ 0 or every λ 1)
        n_pop = popsize * len(bounds)
        lows = np.array([b[0] for b in bounds])
        highs = np.array([b[1] for b in bounds])
        pop = rng.uniform(lows, highs, (n_pop, len(bounds)))
        k = min(n_pop // 4, 16)
        pop[:k, d:] = 0.0
        pop[k : 2 * k, d:] = 1.0
        init = pop
    res = differential_evolution(
        objective,
        bounds,
        init=init,
        seed=int(rng.integers(2**31)),
        vectorized=True,
        updating="deferred",
        maxiter=max(1, evals // (popsize * len(bounds))),
        popsize=popsize,
        tol=0,
        polish=False,
        callback=None if stop is None else (lambda *_args, **_kwargs: stop()),
    )
    rollouts = int(res.nfev) * popsize * len(bounds)  # vectorised: nfev counts population calls
    steps = segment_networks(box, lo, hi, np.asarray(res.x[d:]))
    weights = [[(w[t], b[t]) for w, b in steps] for t in range(horizon) for _ in range(block)]
    return SegmentSearch(np.asarray(res.x[:d]), weights, -float(res.fun), rollouts)


def find_witness(
    bench: System,
    box: WeightBox,
    rng: np.random.Generator,
    *,
    evals: int,
    horizon: int,
    max_horizon: int | None = None,
    stop: Callable[[], bool] | None = None,
) -> Witness | None:
    """Search for a :class:`Witness` of at most ``horizon`` steps with about ``evals`` rollouts
    (:func:`search_segment`, ended early by ``stop``); the best point is checked by
    :func:`replay_witness`.

    Adaptive horizon: when none is found and ``max_horizon`` exceeds ``horizon``, the search is
    repeated with rollouts of ``2·horizon``, ``4·horizon``, … steps up to ``max_horizon``, each
    ``λ`` held for 2, 4, … steps (the same number of unknowns) and ``evals / 2, evals / 4, …``
    rollouts (about the same number of simulated steps per stage). Escapes that need many small
    pushes in one direction (25–35 steps) are found there; the first stage is unchanged."""
    if bench.integer or evals <= 0 or horizon <= 0:
        return None
    block = 1
    while True:
        found = search_segment(
            bench, box, rng, evals=max(1, evals // block), horizon=horizon, block=block, stop=stop
        )
        witness = replay_witness(bench, box, found.x0, found.weights)
        block *= 2
        if witness is not None or max_horizon is None or horizon * block > max_horizon:
            return witness
        if stop is not None and stop():
            return None
