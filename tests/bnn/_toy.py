"""A contracting toy system for verifier tests: x' = 0.5·x + gain·clip(u)·(1, 1) on B = [−1.2, 1.2]².

With ``g(x) = 1 − ‖x‖₁`` (a 2→4→1 ReLU net) ``Inv`` is the unit ℓ1 ball; ``‖x'‖₁ ≤ 0.5 + 2·gain``, so
``Inv`` is closed for every policy when gain ≤ 0.25 and can be left when gain > 0.25. Written as
data, like every system the engine handles.
"""

from __future__ import annotations

import numpy as np

from safecert.bnn.config import DynamicsConfig, SetsConfig
from safecert.bnn.dynamics import System
from safecert.bnn.networks import ReluNetwork
from safecert.bnn.system import build_system


def l1_ball_invariant(radius: float = 1.0) -> ReluNetwork:
    return ReluNetwork(
        [(np.hstack([np.eye(2), -np.eye(2)]), np.zeros(4)), (-np.ones((4, 1)), np.array([radius]))]
    )


def toy(gain: float, initial: float = 0.3) -> System:
    dyn = DynamicsConfig(
        state=["a", "b"],
        action=["u"],
        next={
            "a": f"0.5 * a + {gain!r} * clip(u, -1, 1)",
            "b": f"0.5 * b + {gain!r} * clip(u, -1, 1)",
        },
    )
    r = float(initial)
    sets = SetsConfig.model_validate(
        {
            "domain": {"a": [-1.2, 1.2], "b": [-1.2, 1.2]},
            "initial": {"box": {"a": [-r, r], "b": [-r, r]}},
            "unsafe": {"outside": {"a": [-1.2, 1.2], "b": [-1.2, 1.2]}},
        }
    )
    return build_system("toy", dyn, sets)


def pre_activations(layers, x):
    """Pre-activations of every layer of a Keras-layout ReLU net, computed directly in float64."""
    zs, a = [], x
    for k, (w, b) in enumerate(layers):
        z = a @ w + b
        zs.append(z)
        a = np.maximum(z, 0.0) if k < len(layers) - 1 else z
    return zs
