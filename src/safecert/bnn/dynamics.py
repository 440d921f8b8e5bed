"""The three closed-loop benchmarks of the BNN-safety paper (Appendix C), in float64 and as MILP.

Each :class:`Benchmark` gives

* ``step(x, u)``: the float64 transition for states ``x`` of shape ``(..., n)`` and **raw** policy
  outputs ``u`` of shape ``(..., m)`` (clipping / argmax is part of the dynamics);
* ``box`` — the verification box ``B``; an invariant is ``Inv = {x ∈ B : g(x) ≥ 0}``;
* ``step_box`` — the states from which a step is taken (``B`` except the collision benchmark, whose
  states with ``a_y ≤ 0`` are terminal: the intruder has passed and ``step`` leaves them unchanged);
* ``initial`` — the box ``X0``; ``unsafe`` — ``X_u ∩ B`` as a union of polytopes ``{A x ≤ b}``;
* ``encode_step(milp, x, u)`` — an exact MILP encoding of ``step`` on ``step_box`` (see
  :mod:`safecert.bnn.encoding` for the variable/bound conventions).

The constants follow the published code (restated in ``data/README.md``), which differ from the
paper text: LDS initial box ``‖x‖∞ ≤ 0.4`` (paper 0.6); pendulum ``g = 10`` with the gravity term
multiplied by ``dt`` and ``θ`` updated with the unclipped velocity.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from safecert.bnn.encoding import Bounded, argmax_onehot, linear_combination, piecewise_linear
from safecert.bnn.solvers import Milp
from safecert.errors import ConfigError

BENCHMARKS = ("lds", "pend", "car")


@dataclass(frozen=True)
class Box:
    """Axis-aligned box ``lo ≤ x ≤ hi`` (float64)."""

    lo: np.ndarray
    hi: np.ndarray

    def __init__(self, lo: object, hi: object) -> None:
        object.__setattr__(self, "lo", np.asarray(lo, dtype=np.float64).reshape(-1))
        object.__setattr__(self, "hi", np.asarray(hi, dtype=np.float64).reshape(-1))

    @property
    def dim(self) -> int:
        return int(self.lo.size)

    def contains(self, x: np.ndarray, atol: float = 0.0) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        return np.all((x >= self.lo - atol) & (x <= self.hi + atol), axis=-1)

    def sample(self, rng: np.random.Generator, n: int, integer: bool = False) -> np.ndarray:
        """``n`` uniform samples (uniform over the integer points when ``integer``)."""
        if integer:
            return rng.integers(np.ceil(self.lo), np.floor(self.hi) + 1, size=(n, self.dim)).astype(
                np.float64
            )
        return rng.uniform(self.lo, self.hi, size=(n, self.dim))


@dataclass(frozen=True)
class Polytope:
    """``{x : A x ≤ b}``."""

    A: np.ndarray
    b: np.ndarray

    def contains(self, x: np.ndarray, atol: float = 0.0) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        return np.all(x @ self.A.T <= self.b + atol, axis=-1)


def _halfspace(n: int, i: int, sign: float, bound: float) -> Polytope:
    """``sign · x_i ≥ bound`` written as ``−sign · x_i ≤ −bound``."""
    a = np.zeros((1, n))
    a[0, i] = -sign
    return Polytope(a, np.array([-bound]))


def clip1(u: np.ndarray) -> np.ndarray:
    return np.clip(u, -1.0, 1.0)


def angular(x: np.ndarray) -> np.ndarray:
    """The paper's piecewise-linear sine surrogate: period 2π, +1 at π/2, −1 at 3π/2, 0 at 0 and π."""
    t = np.mod(np.asarray(x, dtype=np.float64) - np.pi / 2, 2 * np.pi)
    return np.where(t <= np.pi, 1.0 - 2.0 * t / np.pi, -1.0 + 2.0 * (t - np.pi) / np.pi)


@dataclass(frozen=True)
class Benchmark:
    """A closed-loop system ``x' = step(x, π(x))`` with its sets (see the module docstring)."""

    name: str
    box: Box
    step_box: Box
    initial: Box
    unsafe: tuple[Polytope, ...]
    integer: bool
    n_actions: int
    _step: Callable[[np.ndarray, np.ndarray], np.ndarray] = field(repr=False)
    _encode: Callable[[Milp, Bounded, Bounded, float], Bounded] = field(repr=False)

    @property
    def state_dim(self) -> int:
        return self.box.dim

    def step(self, x: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Float64 successor of ``x`` under raw policy output ``u`` (vectorized)."""
        x = np.asarray(x, dtype=np.float64)
        u = np.asarray(u, dtype=np.float64)
        return self._step(x, u)

    def encode_step(self, milp: Milp, x: Bounded, u: Bounded, tie_gap: float = 0.0) -> Bounded:
        """Exact MILP encoding of ``step`` for ``x`` in ``step_box`` and raw action ``u``.

        ``tie_gap > 0`` makes a discrete choice (argmax) strict by that gap: an under-approximation
        used only to find witnesses that replay in float64, never for proofs."""
        return self._encode(milp, x, u, tie_gap)

    def in_box(self, x: np.ndarray, atol: float = 0.0) -> np.ndarray:
        return self.box.contains(x, atol)

    def in_initial(self, x: np.ndarray, atol: float = 0.0) -> np.ndarray:
        return self.initial.contains(x, atol)

    def in_unsafe(self, x: np.ndarray, atol: float = 0.0) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        hits = [p.contains(x, atol) for p in self.unsafe]
        return np.any(np.stack(hits, axis=0), axis=0)

    def sample_initial(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self.initial.sample(rng, n, self.integer)

    def sample_unsafe(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` samples of ``X_u ∩ B``: each polytope's axis-aligned rows shrink ``B`` to a sub-box,
        which is sampled and filtered by the remaining rows; polytopes are chosen uniformly."""
        out: list[np.ndarray] = []
        which = rng.integers(0, len(self.unsafe), size=n)
        for k, poly in enumerate(self.unsafe):
            need = int(np.sum(which == k))
            lo, hi = self.box.lo.copy(), self.box.hi.copy()
            for a, b in zip(poly.A, poly.b, strict=True):
                nz = np.flatnonzero(a)
                if nz.size == 1:
                    i = nz[0]
                    if a[i] > 0:
                        hi[i] = min(hi[i], b / a[i])
                    else:
                        lo[i] = max(lo[i], b / a[i])
            sub = Box(lo, hi)
            got: list[np.ndarray] = []
            while need > 0 and sum(len(g) for g in got) < need:
                cand = sub.sample(rng, max(4 * need, 16), self.integer)
                got.append(cand[poly.contains(cand)])
            if need > 0:
                out.append(np.concatenate(got)[:need])
        return rng.permutation(np.concatenate(out)) if out else np.zeros((0, self.state_dim))


# ---- LDS ------------------------------------------------------------------------------------
def _lds_step(x: np.ndarray, u: np.ndarray) -> np.ndarray:
    uc = clip1(u[..., 0])
    y_next = x[..., 1] + 0.2 * uc
    x_next = x[..., 0] + 0.3 * y_next + 0.05 * uc
    return np.stack([x_next, y_next], axis=-1)


def _lds_encode(milp: Milp, x: Bounded, u: Bounded, tie_gap: float = 0.0) -> Bounded:
    uc = piecewise_linear(milp, u.item(0), clip1, kinks=(-1.0, 1.0))
    s = Bounded.concat([x, uc])  # (x, y, u_c)
    y_next = linear_combination(milp, s, np.array([0.0, 1.0, 0.2]))
    x_next = linear_combination(milp, s, np.array([1.0, 0.3, 0.11]))
    return Bounded.concat([x_next, y_next])


def lds(initial_radius: float = 0.4) -> Benchmark:
    """Unstable LDS: ``y' = y + 0.2 clip(u)``, ``x' = x + 0.3 y' + 0.05 clip(u)``;
    ``B = X_u``'s complement closure ``‖x‖∞ ≤ 1.2``; ``X_u = {‖x‖∞ ≥ 1.2}``; ``X0 = ‖x‖∞ ≤ r``."""
    box = Box([-1.2, -1.2], [1.2, 1.2])
    unsafe = tuple(_halfspace(2, i, s, 1.2) for i in range(2) for s in (1.0, -1.0))
    r = float(initial_radius)
    return Benchmark(
        "lds", box, box, Box([-r, -r], [r, r]), unsafe, False, 1, _lds_step, _lds_encode
    )


# ---- inverted pendulum ----------------------------------------------------------------------
PEND_G, PEND_L, PEND_M, PEND_DT, PEND_TORQUE, PEND_MAX_SPEED = 10.0, 1.0, 0.8, 0.05, 2.5, 8.0
_PEND_GRAV = -3.0 * PEND_G / (2.0 * PEND_L) * PEND_DT  # coefficient of angular(θ + π)
_PEND_ACT = 3.0 / (PEND_M * PEND_L**2) * PEND_TORQUE * PEND_DT  # coefficient of clip(u)


def _pend_gravity(theta: np.ndarray) -> np.ndarray:
    return angular(theta + np.pi)


def _pend_step(x: np.ndarray, u: np.ndarray) -> np.ndarray:
    th, thdot = x[..., 0], x[..., 1]
    new_thdot = thdot + _PEND_GRAV * _pend_gravity(th) + _PEND_ACT * clip1(u[..., 0])
    new_th = th + new_thdot * PEND_DT
    return np.stack([new_th, np.clip(new_thdot, -PEND_MAX_SPEED, PEND_MAX_SPEED)], axis=-1)


def _pend_encode(milp: Milp, x: Bounded, u: Bounded, tie_gap: float = 0.0) -> Bounded:
    th = x.item(0)
    lo, hi = float(th.lo[0]), float(th.hi[0])
    # kinks of angular(θ + π) at θ = −π/2 + kπ; list one beyond each end (piecewise_linear's contract)
    ks = np.arange(np.floor((lo + np.pi / 2) / np.pi) - 1, np.ceil((hi + np.pi / 2) / np.pi) + 2)
    kinks = tuple(ks * np.pi - np.pi / 2)
    grav = piecewise_linear(milp, th, _pend_gravity, kinks=kinks)
    uc = piecewise_linear(milp, u.item(0), clip1, kinks=(-1.0, 1.0))
    s = Bounded.concat([x, grav, uc])  # (θ, θ̇, angular(θ+π), clip(u))
    v = np.array([0.0, 1.0, _PEND_GRAV, _PEND_ACT])
    new_thdot = linear_combination(milp, s, v)
    new_th = linear_combination(milp, s, np.array([1.0, 0.0, 0.0, 0.0]) + PEND_DT * v)
    clipped = piecewise_linear(
        milp,
        new_thdot,
        lambda t: np.clip(t, -PEND_MAX_SPEED, PEND_MAX_SPEED),
        kinks=(-PEND_MAX_SPEED, PEND_MAX_SPEED),
    )
    return Bounded.concat([new_th, clipped])


def pend() -> Benchmark:
    """Inverted pendulum with the triangle-wave gravity term; ``B = |θ| ≤ 2.8, |θ̇| ≤ 4``;
    ``X0 = |θ| ≤ π/6, |θ̇| ≤ 0.2``; ``X_u = |θ| ≥ 0.9 or |θ̇| ≥ 2``."""
    box = Box([-2.8, -4.0], [2.8, 4.0])
    unsafe = (
        _halfspace(2, 0, 1.0, 0.9),
        _halfspace(2, 0, -1.0, 0.9),
        _halfspace(2, 1, 1.0, 2.0),
        _halfspace(2, 1, -1.0, 2.0),
    )
    init = Box([-np.pi / 6, -0.2], [np.pi / 6, 0.2])
    return Benchmark("pend", box, box, init, unsafe, False, 1, _pend_step, _pend_encode)


# ---- collision avoidance --------------------------------------------------------------------
CAR_BOUND = 2.0
_CAR_MOVES = np.array([0.0, 1.0, -1.0])  # argmax index → u


def _car_step(x: np.ndarray, u: np.ndarray) -> np.ndarray:
    move = _CAR_MOVES[np.argmax(u, axis=-1)]
    live = x[..., 2] > 0
    p = np.where(live, np.clip(x[..., 0] + move, -CAR_BOUND, CAR_BOUND), x[..., 0])
    ay = np.where(live, x[..., 2] - 1.0, x[..., 2])
    return np.stack([p, x[..., 1], ay], axis=-1)


def _car_encode(milp: Milp, x: Bounded, u: Bounded, tie_gap: float = 0.0) -> Bounded:
    onehot = argmax_onehot(milp, u, tie_gap)
    s = Bounded.concat([x, onehot])  # (p, a_x, a_y, b0, b1, b2)
    moved = linear_combination(milp, s, np.array([1.0, 0.0, 0.0, 0.0, 1.0, -1.0]), integer=True)
    p_next = piecewise_linear(
        milp,
        moved,
        lambda t: np.clip(t, -CAR_BOUND, CAR_BOUND),
        kinks=(-CAR_BOUND, CAR_BOUND),
        integer=True,
    )
    ay_next = linear_combination(
        milp, s, np.array([0.0, 0.0, 1.0, 0.0, 0.0, 0.0]), const=-1.0, integer=True
    )
    return Bounded.concat([p_next, x.item(1), ay_next])


def car() -> Benchmark:
    """Collision avoidance on integer states ``(p, a_x, a_y)``: ``u = (0, +1, −1)[argmax π(x)]``,
    ``p' = clip(p + u, ±2)``, ``a_x' = a_x``, ``a_y' = a_y − 1``; ``B = [−2, 2]² × [0, 5]``;
    ``X0 = |p| ≤ 2, |a_x| ≤ 2, a_y = 5``; ``X_u = a_y ≤ 0 ∧ |p − a_x| ≤ 1``; ``a_y ≤ 0`` terminal."""
    box = Box([-2.0, -2.0, 0.0], [2.0, 2.0, 5.0])
    step_box = Box([-2.0, -2.0, 1.0], [2.0, 2.0, 5.0])
    unsafe = (
        Polytope(
            np.array([[0.0, 0.0, 1.0], [1.0, -1.0, 0.0], [-1.0, 1.0, 0.0]]),
            np.array([0.0, 1.0, 1.0]),
        ),
    )
    init = Box([-2.0, -2.0, 5.0], [2.0, 2.0, 5.0])
    return Benchmark("car", box, step_box, init, unsafe, True, 3, _car_step, _car_encode)


def get_benchmark(name: str) -> Benchmark:
    """``lds``/``pend``/``car``; the policy names ``lds_all`` etc. map to their system."""
    system = name.removesuffix("_all")
    factories = {"lds": lds, "pend": pend, "car": car}
    if system not in factories:
        raise ConfigError(
            f"unknown benchmark {name!r}",
            field="benchmark",
            fix=f"use one of {BENCHMARKS} (or *_all)",
        )
    return factories[system]()


def rollout(
    bench: Benchmark, policy: Callable[[np.ndarray], np.ndarray], x0: np.ndarray, steps: int
) -> np.ndarray:
    """States ``x_0 … x_steps`` (shape ``(steps + 1, …, n)``) of the closed loop under ``policy``."""
    xs = [np.asarray(x0, dtype=np.float64)]
    for _ in range(steps):
        xs.append(bench.step(xs[-1], policy(xs[-1])))
    return np.stack(xs)
