"""A closed-loop system ``x' = f(x, π(x))`` compiled from data: dynamics, sets, verification box.

A :class:`System` is built from the ``[dynamics]`` and ``[sets]`` tables of a BNN config by
:func:`safecert.bnn.system.build_system` (the three paper systems ship as such tables, see
:func:`safecert.bnn.system.get_benchmark`). It gives

* ``step(x, u)`` — the float64 transition for states ``x`` of shape ``(..., n)`` and **raw** policy
  outputs ``u`` of shape ``(..., m)`` (the ``argmax`` over ``choices``, when declared, is part of the
  dynamics); states of ``box`` outside ``step_box`` are terminal (``step`` leaves them unchanged);
* ``encode_step(milp, x, u)`` — the exact MILP encoding of the same transition on ``step_box``;
* ``box`` — the verification box ``B`` (an invariant is ``Inv = {x ∈ B : g(x) ≥ 0}``),
  ``initial`` (``X0``) and ``unsafe`` (``X_u ∩ B``) as :class:`~safecert.bnn.sets.Region` objects.

Both ``step`` and ``encode_step`` interpret the same :class:`Dynamics` (one tree of
:mod:`safecert.bnn.pwl` expressions per next-state variable): there is no second, hand-written
encoder that could drift from the simulator.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from safecert.bnn.encoding import Bounded, argmax_onehot, linear_combination
from safecert.bnn.pwl import MilpEncoder, Node, evaluate
from safecert.bnn.sets import Box, Region
from safecert.bnn.solvers import Milp


@dataclass(frozen=True)
class Dynamics:
    """Compiled dynamics: state and action names, optional discrete ``choices`` (row ``k`` is the
    action vector taken when policy output ``k`` is the largest; numpy's first-index rule on ties
    in float64, any maximiser in the MILP — a superset, hence sound), ``define`` bindings evaluated
    in order, and one expression per next-state variable (in ``state`` order). ``integer``: states
    are integers and every expression maps integers to integers (checked when compiled)."""

    state: tuple[str, ...]
    action: tuple[str, ...]
    choices: np.ndarray | None
    define: tuple[tuple[str, Node], ...]
    next: tuple[Node, ...]
    integer: bool = False

    @property
    def policy_outputs(self) -> int:
        return len(self.action) if self.choices is None else int(self.choices.shape[0])

    def simulate(self, x: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Float64 successors of states ``x`` (..., n) under raw policy outputs ``u`` (..., m)."""
        x = np.asarray(x, dtype=np.float64)
        u = np.asarray(u, dtype=np.float64)
        if self.choices is not None:
            u = self.choices[np.argmax(u, axis=-1)]
        shape = x.shape[:-1]
        env: dict[str, np.ndarray] = {n: x[..., i] for i, n in enumerate(self.state)}
        env.update({n: u[..., j] for j, n in enumerate(self.action)})
        for name, node in self.define:
            env[name] = evaluate(node, env, shape)
        return np.stack([evaluate(e, env, shape) for e in self.next], axis=-1)

    def encode(self, milp: Milp, x: Bounded, u: Bounded, tie_gap: float = 0.0) -> Bounded:
        """Exact MILP encoding of :meth:`simulate` for ``x`` within its column bounds.

        ``tie_gap > 0`` makes the argmax strict by that gap: an under-approximation used only to
        find witnesses that replay in float64, never for proofs."""
        cols = {n: x.item(i) for i, n in enumerate(self.state)}
        if self.choices is not None:
            onehot = argmax_onehot(milp, u, tie_gap)
            for j, n in enumerate(self.action):
                cols[n] = linear_combination(milp, onehot, self.choices[:, j], integer=self.integer)
        else:
            cols.update({n: u.item(j) for j, n in enumerate(self.action)})
        enc = MilpEncoder(milp, cols, integer=self.integer)
        for name, node in self.define:
            enc.bind(name, node)
        return Bounded.concat([enc.column(e) for e in self.next])


@dataclass(frozen=True)
class System:
    """A closed-loop system with its sets (module docstring)."""

    name: str
    dynamics: Dynamics
    box: Box
    step_box: Box
    initial: Region
    unsafe: Region
    integer: bool

    @property
    def state_dim(self) -> int:
        return self.box.dim

    @property
    def n_actions(self) -> int:
        """The number of policy outputs the dynamics read."""
        return self.dynamics.policy_outputs

    def step(self, x: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Float64 successor of ``x`` under raw policy output ``u`` (vectorized); states outside
        ``step_box`` are terminal and stay where they are."""
        x = np.asarray(x, dtype=np.float64)
        nxt = self.dynamics.simulate(x, u)
        if np.array_equal(self.step_box.lo, self.box.lo) and np.array_equal(
            self.step_box.hi, self.box.hi
        ):
            return nxt
        live = self.step_box.contains(x)[..., None]
        return np.where(live, nxt, x)

    def encode_step(self, milp: Milp, x: Bounded, u: Bounded, tie_gap: float = 0.0) -> Bounded:
        """Exact MILP encoding of ``step`` for ``x`` in ``step_box`` and raw action ``u``."""
        return self.dynamics.encode(milp, x, u, tie_gap)

    def in_box(self, x: np.ndarray, atol: float = 0.0) -> np.ndarray:
        return self.box.contains(x, atol)

    def in_initial(self, x: np.ndarray, atol: float = 0.0) -> np.ndarray:
        return self.initial.contains(x, atol)

    def in_unsafe(self, x: np.ndarray, atol: float = 0.0) -> np.ndarray:
        return self.unsafe.contains(x, atol)

    def sample_initial(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self.initial.sample(rng, n, self.integer)

    def sample_unsafe(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self.unsafe.sample(rng, n, self.integer)


def rollout(
    bench: System, policy: Callable[[np.ndarray], np.ndarray], x0: np.ndarray, steps: int
) -> np.ndarray:
    """States ``x_0 … x_steps`` (shape ``(steps + 1, …, n)``) of the closed loop under ``policy``."""
    xs = [np.asarray(x0, dtype=np.float64)]
    for _ in range(steps):
        xs.append(bench.step(xs[-1], policy(xs[-1])))
    return np.stack(xs)
