"""Exhaustive analysis of a finite system: integer states in a bounded box, discrete actions.

For such a system (``integer = true`` with ``choices``, e.g. the collision-avoidance benchmark:
150 states) the closure question can be answered state by state instead of by one large MILP.
:func:`analyse_finite` computes, for one weight box ``W_ε``:

* **the action sets** — for every state ``x`` of the step domain and every choice ``k``, whether
  some ``w ∈ W_ε`` makes ``k`` the argmax of ``π_w(x)``: one small MILP per pair (the same exact
  interval-weight encoding as the verifier, :func:`~safecert.bnn.encoding.encode_network`), asked
  first strictly, by a gap of ``1e-4`` (well above the solver tolerance), so that the witness
  replays in float64 — the MILP's pre-activations become concrete weights in the box
  (:func:`~safecert.bnn.replay.realise_weights`) whose float64 argmax is ``k`` — and, where that is
  infeasible or its witness does not replay, with ties admitted (what the verifier's relaxed
  closure query admits);
* **the maximal positive invariant** ``M`` — the greatest set of safe states (``B \\ X_u``) closed
  under every admitted action (greatest fixed point). Every invariant the verifier can prove lies in
  ``M`` (its closure query admits the same actions, ties included), so ``X0 ⊄ M`` means that no
  candidate ``g`` can be certified at this ε;
* **whether any certificate is possible** — the verifier proves ``g`` only if ``{g ≥ −margin}``
  contains ``X0`` and is closed under the admitted actions, i.e. only if ``X0 ⊆ M``;
* **a witness trajectory** — when ``X0`` is not inside the maximal invariant of the *replayed*
  actions, a path from a state of ``X0`` to ``X_u`` (or out of ``B``) with concrete weights in
  ``W_ε`` at every step, re-simulated in float64 (:meth:`FiniteAnalysis.replay`). That is a proof,
  not a guess, that some trajectory whose weights stay in ``W_ε`` is unsafe: no positive invariant
  exists at this ε under any verifier.

The ε search uses it on finite systems (:mod:`safecert.bnn.search`): ``M`` labels every state
exactly (in place of the Monte-Carlo bootstrap), and ``X0 ⊄ M`` ends the attempt at once (with the
witness trajectory as the reason where one replays).
Assumption: the floating-point MILP solver decides each small query within its tolerance (≈1e-6);
the witness trajectory does not rest on it (it is replayed), the labels are only training data.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from safecert.bnn.dynamics import System
from safecert.bnn.encoding import argmax_onehot, encode_network, state_vars
from safecert.bnn.networks import Layer, forward
from safecert.bnn.replay import realise_weights
from safecert.bnn.solvers import Milp, solve
from safecert.bnn.spec import WeightBox
from safecert.errors import ConfigError, SolverError

#: largest state space analysed (one small MILP per state and action)
MAX_STATES = 5000
#: the argmax gap of the strict query whose witnesses must replay in float64
STRICT_GAP = 1e-4


def is_finite(bench: System, max_states: int = MAX_STATES) -> bool:
    """Integer states, discrete actions, and at most ``max_states`` integer points in ``B``."""
    if not bench.integer or bench.dynamics.choices is None:
        return False
    sizes = np.floor(bench.box.hi) - np.ceil(bench.box.lo) + 1
    return bool(np.prod(sizes) <= max_states)


def grid_states(bench: System) -> np.ndarray:
    """Every integer point of the verification box, shape ``(N, d)``."""
    axes = [
        np.arange(np.ceil(lo), np.floor(hi) + 1)
        for lo, hi in zip(bench.box.lo, bench.box.hi, strict=True)
    ]
    return np.array(list(itertools.product(*axes)), dtype=np.float64).reshape(-1, bench.state_dim)


@dataclass(frozen=True)
class Transition:
    """One replayed step: state, the concrete weights used, the action taken, the successor."""

    x: np.ndarray
    weights: list[Layer]
    action: int
    x_next: np.ndarray


@dataclass(frozen=True)
class FiniteAnalysis:
    """Result of :func:`analyse_finite` (module docstring). ``admitted[i, k]``: choice ``k`` is
    possible at ``states[i]`` with ties admitted; ``replayed[i, k]``: also by a strict winner with
    weights that replay. ``maximal``: the maximal invariant over the admitted actions."""

    states: np.ndarray
    admitted: np.ndarray
    replayed: np.ndarray
    maximal: np.ndarray
    initial: np.ndarray
    witness: tuple[Transition, ...] | None
    milps: int

    @property
    def initial_inside(self) -> bool:
        """Is ``X0 ⊆ M``? (necessary for any certificate at this ε)"""
        return bool(np.all(self.maximal[self.initial]))

    def labels(self) -> np.ndarray:
        """1 for the states of the maximal invariant, 0 for the others."""
        return self.maximal.astype(np.float64)

    def describe(self) -> str:
        """One line: the witness trajectory, or how much of ``X0`` lies outside ``M``."""
        if self.witness is not None:
            path = (
                " → ".join(_fmt(t.x) for t in self.witness) + " → " + _fmt(self.witness[-1].x_next)
            )
            return (
                f"no positive invariant exists: {path} reaches X_u or leaves the box in "
                f"{len(self.witness)} steps with weights in the box (replayed in float64)"
            )
        out = int(np.sum(~self.maximal[self.initial]))
        text = f"{out} of {int(self.initial.sum())} states of X0 lie outside the maximal invariant"
        if out:
            return (
                f"no invariant the verifier can prove: {text} of the actions the MILP admits "
                "(ties included); no strictly unsafe trajectory replays"
            )
        return text


def _fmt(x: np.ndarray) -> str:
    return "(" + ", ".join(f"{v:g}" for v in np.asarray(x)) + ")"


def _action_query(box: WeightBox, x: np.ndarray, k: int, gap: float) -> tuple[bool, list | None]:
    """Is choice ``k`` the argmax at ``x`` for some weight in ``box`` (by ``gap``)? With the
    witness's pre-activations."""
    milp = Milp()
    xv = state_vars(milp, x, x)
    enc = encode_network(milp, box, xv)
    onehot = argmax_onehot(milp, enc.out, gap)
    milp.lb[int(onehot.idx[k])] = 1.0
    res = solve(milp)
    if res.status not in ("feasible", "infeasible"):
        raise SolverError(
            f"the MILP at x = {_fmt(x)}, choice {k} ended with {res.status} ({res.message})",
            field="finite analysis",
            fix="check the solver installation",
        )
    if res.status == "infeasible" or res.values is None:
        return False, None
    return True, [p.value(res.values) for p in enc.pre]


def replay_action(box: WeightBox, x: np.ndarray, k: int, targets: list) -> list[Layer] | None:
    """Concrete weights in ``box`` realising ``targets`` at ``x`` whose float64 argmax is ``k``."""
    weights = realise_weights(box, x, targets)
    if not box.contains(weights) or int(np.argmax(forward(weights, x))) != k:
        return None
    return weights


def _successor(bench: System, x: np.ndarray, k: int) -> np.ndarray:
    return bench.step(x, np.eye(bench.n_actions)[k])


def _greatest_fixed_point(
    bench: System, states: np.ndarray, actions: np.ndarray, safe: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Maximal invariant inside ``safe`` under ``actions``; also each removed state's removal
    round and the action that removed it (for witness paths)."""
    index = {tuple(s): i for i, s in enumerate(states)}
    n = len(states)
    succ = np.full((n, actions.shape[1]), -2, dtype=np.int64)  # -2: not admitted, -1: leaves B
    for i, k in zip(*np.nonzero(actions), strict=True):
        succ[i, k] = index.get(tuple(_successor(bench, states[i], int(k))), -1)
    inside = safe.copy()
    rank = np.where(safe, -1, 0)
    via = np.full(n, -1, dtype=np.int64)
    for r in itertools.count(1):
        bad = (succ == -1) | ((succ >= 0) & ~inside[np.maximum(succ, 0)])
        drop = inside & bad.any(axis=1)
        if not drop.any():
            break
        via[drop] = np.argmax(bad[drop], axis=1)
        rank[drop] = r
        inside &= ~drop
    return inside, rank, via


def analyse_finite(bench: System, box: WeightBox) -> FiniteAnalysis:
    """The action sets, the maximal invariant and, if one exists, a replayed unsafe trajectory
    from ``X0`` for ``W_ε = box`` (module docstring). Needs :func:`is_finite`."""
    if not is_finite(bench):
        raise ConfigError(
            f"system {bench.name} is not finite",
            field="system",
            fix=f"integer states, discrete choices and at most {MAX_STATES} states",
        )
    states = grid_states(bench)
    live = bench.step_box.contains(states)
    m = bench.n_actions
    admitted = np.zeros((len(states), m), dtype=bool)
    replayed = np.zeros_like(admitted)
    weights: dict[tuple[int, int], list[Layer]] = {}
    milps = 0
    for i in map(int, np.flatnonzero(live)):
        for k in range(m):
            ok, targets = _action_query(box, states[i], k, STRICT_GAP)
            milps += 1
            w = replay_action(box, states[i], k, targets) if targets is not None else None
            if w is not None:
                replayed[i, k] = True
                weights[(i, k)] = w
            else:
                ok, _ = _action_query(box, states[i], k, 0.0)
                milps += 1
            admitted[i, k] = ok or replayed[i, k]
    safe = ~bench.in_unsafe(states)
    maximal, _, _ = _greatest_fixed_point(bench, states, admitted, safe)
    initial = bench.in_initial(states)
    real, rank, via = _greatest_fixed_point(bench, states, replayed, safe)
    witness = None
    outside = np.flatnonzero(initial & ~real)
    if outside.size:
        witness = _witness(bench, states, int(outside[0]), rank, via, weights)
    return FiniteAnalysis(states, admitted, replayed, maximal, initial, witness, milps)


def _witness(
    bench: System,
    states: np.ndarray,
    start: int,
    rank: np.ndarray,
    via: np.ndarray,
    weights: dict[tuple[int, int], list[Layer]],
) -> tuple[Transition, ...] | None:
    """Follow the removal actions down the ranks from ``start`` to ``X_u`` or out of ``B``,
    re-simulating every step in float64 with its concrete weights; ``None`` if a step does not
    reproduce (never expected: every step's weights were replayed)."""
    index = {tuple(s): i for i, s in enumerate(states)}
    path: list[Transition] = []
    i = start
    while rank[i] > 0:
        k = int(via[i])
        w = weights[(i, k)]
        x = states[i]
        x_next = bench.step(x, forward(w, x))
        if int(np.argmax(forward(w, x))) != k:
            return None
        path.append(Transition(x, w, k, x_next))
        j = index.get(tuple(x_next))
        if j is None or not bench.in_box(x_next) or bench.in_unsafe(x_next):
            return tuple(path)
        i = j
    return None
