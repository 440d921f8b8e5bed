"""MuJoCo velocity tasks: cost checked against a velocity computed independently from the simulator."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import safecert.envs  # noqa: F401  (registers the ids)
from safecert.envs.velocity import VELOCITY_THRESHOLDS

# Safety-Gymnasium v1 velocity thresholds (safety_gymnasium/tasks/safe_velocity/*_v1.py).
PUBLISHED = {"Hopper": 0.7402, "HalfCheetah": 3.2096, "Ant": 2.6222}


def torso_xy(env) -> np.ndarray:
    """Planar torso position straight from MuJoCo (root slide joint for the 2-D robots)."""
    data = env.unwrapped.data
    if hasattr(env.unwrapped, "_main_body"):  # Ant: the torso body's world position
        return data.body(env.unwrapped._main_body).xpos[:2].copy()
    return np.array([data.qpos[0], 0.0])


@pytest.mark.parametrize("robot", ["Hopper", "HalfCheetah", "Ant"])
def test_cost_is_velocity_above_threshold(robot):
    assert VELOCITY_THRESHOLDS[robot] == PUBLISHED[robot]
    low = {"Hopper": 0.02, "HalfCheetah": 0.3, "Ant": 0.3}[robot]  # low: both outcomes occur
    env = gym.make(f"Safe{robot}Velocity-v0", velocity_threshold=low)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    costs = []
    for _ in range(40):
        before = torso_xy(env)
        _, _, terminated, truncated, info = env.step(rng.uniform(-1, 1, env.action_space.shape))
        v_xy = (torso_xy(env) - before) / env.unwrapped.dt
        velocity = float(np.hypot(*v_xy)) if robot == "Ant" else float(v_xy[0])
        assert info["velocity"] == pytest.approx(velocity, abs=1e-9)
        assert info["cost"] == float(velocity > low)
        costs.append(info["cost"])
        if terminated or truncated:
            env.reset(seed=1)
    assert 0 < sum(costs) < len(costs)


def test_default_threshold_and_model_access():
    env = gym.make("SafeHalfCheetahVelocity-v0")
    obs, info = env.reset(seed=0)
    assert info["cost"] == 0.0 and obs.shape == (17,)
    _, _, _, _, info = env.step(np.zeros(6))
    assert info["velocity_threshold"] == PUBLISHED["HalfCheetah"]
    model = env.unwrapped.model
    assert model.body_mass.shape[0] > 1 and model.geom_friction.shape[1] == 3
    assert env.spec.max_episode_steps == 1000


def test_unknown_robot_is_config_error():
    from safecert.envs.velocity import make_velocity_env
    from safecert.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown robot"):
        make_velocity_env("Walker")
