"""The hand-written simulators and MILP encoders the engine had before dynamics became data.

Kept only as test oracles: the packaged TOML systems (``safecert/bnn/data/*.system.toml``) must
give the same float64 steps and the same MILP images as these (tests/bnn/test_systems.py).
"""

from __future__ import annotations

import numpy as np

from safecert.bnn.encoding import Bounded, argmax_onehot, linear_combination, piecewise_linear
from safecert.bnn.solvers import Milp


def clip1(u: np.ndarray) -> np.ndarray:
    return np.clip(u, -1.0, 1.0)


def angular(x: np.ndarray) -> np.ndarray:
    """The paper's piecewise-linear sine surrogate: period 2π, +1 at π/2, −1 at 3π/2, 0 at 0 and π."""
    t = np.mod(np.asarray(x, dtype=np.float64) - np.pi / 2, 2 * np.pi)
    return np.where(t <= np.pi, 1.0 - 2.0 * t / np.pi, -1.0 + 2.0 * (t - np.pi) / np.pi)


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


STEPS = {"lds": _lds_step, "pend": _pend_step, "car": _car_step}
ENCODERS = {"lds": _lds_encode, "pend": _pend_encode, "car": _car_encode}
