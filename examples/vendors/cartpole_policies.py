"""Scripted vendor policies for SafeCartPole-v0 (``python:vendors.cartpole_policies:<name>``).

Observations ``(x, x_dot, theta, theta_dot)``; actions are integers (0 = push left, 1 = right),
returned as shape ``(B,)``.

- :func:`balance` keeps the pole up and ignores where the cart is (drifts out of the safe band).
- :func:`centred_balance` also steers the cart back to the centre of the track.
"""

from __future__ import annotations

import numpy as np


def _push_right(score: np.ndarray) -> np.ndarray:
    return (score > 0).astype(np.int64)


def balance(obs: np.ndarray) -> np.ndarray:
    """Linear feedback on the pole angle and angular velocity only."""
    obs = np.atleast_2d(np.asarray(obs, dtype=np.float64))
    return _push_right(obs[:, 2] + 0.5 * obs[:, 3])


def centred_balance(obs: np.ndarray) -> np.ndarray:
    """Pole feedback plus a weak pull of the cart towards x = 0 (a hand-tuned LQR-like gain)."""
    obs = np.atleast_2d(np.asarray(obs, dtype=np.float64))
    return _push_right(obs[:, 2] + 0.5 * obs[:, 3] + 0.05 * obs[:, 0] + 0.1 * obs[:, 1])
