"""SafeCartPole-v0: cost exactly when the cart is outside the safe band."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import safecert.envs  # noqa: F401
from safecert.errors import ConfigError


def test_cost_marks_positions_outside_the_band():
    env = gym.make("SafeCartPole-v0", safe_band=0.05)
    obs, info = env.reset(seed=3)
    assert info["cost"] == 0.0
    costs, xs, done = [], [], False
    while not done:  # push right every step: the cart drifts out of the band, the pole falls
        obs, _, terminated, truncated, info = env.step(np.array([1]))
        costs.append(info["cost"])
        xs.append(obs[0])
        done = terminated or truncated
    np.testing.assert_array_equal(costs, (np.abs(xs) > 0.05).astype(float))
    assert terminated and sum(costs) > 0


def test_band_must_be_positive():
    with pytest.raises(ConfigError, match="safe_band"):
        gym.make("SafeCartPole-v0", safe_band=0.0)
