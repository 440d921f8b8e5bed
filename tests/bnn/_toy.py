"""A contracting toy system for verifier tests: x' = 0.5·x + gain·clip(u)·(1, 1) on B = [−1.2, 1.2]².

With ``g(x) = 1 − ‖x‖₁`` (a 2→4→1 ReLU net) ``Inv`` is the unit ℓ1 ball; ``‖x'‖₁ ≤ 0.5 + 2·gain``, so
``Inv`` is closed for every policy when gain ≤ 0.25 and can be left when gain > 0.25.
"""

from __future__ import annotations

import numpy as np

from safecert.bnn.dynamics import Benchmark, Box, Polytope, clip1
from safecert.bnn.encoding import Bounded, linear_combination, piecewise_linear
from safecert.bnn.networks import ReluNetwork


def l1_ball_invariant(radius: float = 1.0) -> ReluNetwork:
    return ReluNetwork(
        [(np.hstack([np.eye(2), -np.eye(2)]), np.zeros(4)), (-np.ones((4, 1)), np.array([radius]))]
    )


def toy(gain: float, initial: float = 0.3) -> Benchmark:
    def step(x: np.ndarray, u: np.ndarray) -> np.ndarray:
        return 0.5 * x + gain * clip1(u[..., :1])

    def encode(milp, x: Bounded, u: Bounded, tie_gap: float = 0.0) -> Bounded:
        uc = piecewise_linear(milp, u.item(0), clip1, kinks=(-1.0, 1.0))
        s = Bounded.concat([x, uc])
        return Bounded.concat(
            [
                linear_combination(milp, s, np.array([0.5, 0.0, gain])),
                linear_combination(milp, s, np.array([0.0, 0.5, gain])),
            ]
        )

    box = Box([-1.2, -1.2], [1.2, 1.2])
    unsafe = tuple(
        Polytope(np.array([[s * (i == 0), s * (i == 1)]], dtype=float), np.array([-1.2]))
        for i in (0, 1)
        for s in (-1.0, 1.0)
    )
    return Benchmark(
        "toy", box, box, Box([-initial] * 2, [initial] * 2), unsafe, False, 1, step, encode
    )


def pre_activations(layers, x):
    """Pre-activations of every layer of a Keras-layout ReLU net, computed directly in float64."""
    zs, a = [], x
    for k, (w, b) in enumerate(layers):
        z = a @ w + b
        zs.append(z)
        a = np.maximum(z, 0.0) if k < len(layers) - 1 else z
    return zs
