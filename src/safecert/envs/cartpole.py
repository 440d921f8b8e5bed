"""SafeCartPole-v0: Gymnasium's CartPole-v1 with a cost for leaving a safe band of the track."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from safecert.errors import ConfigError


class SafeCartPoleEnv(CartPoleEnv):
    """CartPole (balance the pole; discrete actions 0 = push left, 1 = push right) with a cost.

    ``info["cost"] = 1.0`` on each step that ends with the cart position outside
    ``[-safe_band, safe_band]`` (default 1.0 m; the episode itself only terminates at 2.4 m or when
    the pole passes 12 degrees), else ``0.0``. Use ``goal = "no_termination"`` (the pole stayed up).
    Dynamics, rewards and terminations are Gymnasium's ``CartPole-v1``; the physical parameters
    (``masscart``, ``masspole``, ``length``, ``force_mag``) are attributes and may be shifted.

    Example::

        import gymnasium as gym, safecert.envs
        env = gym.make("SafeCartPole-v0", safe_band=0.5)
    """

    def __init__(self, safe_band: float = 1.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not 0 < safe_band:
            raise ConfigError(f"must be > 0 (got {safe_band})", field="env_kwargs.safe_band")
        self.safe_band = float(safe_band)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if not isinstance(action, int | np.integer):  # one number, as an array of any shape
            action = np.asarray(action).reshape(-1)[0]
        obs, reward, terminated, truncated, info = super().step(int(action))
        info["cost"] = float(abs(float(obs[0])) > self.safe_band)
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = super().reset(**kwargs)
        info["cost"] = 0.0
        return obs, info
