"""SafePointGoal-v0: cost geometry, goal, layouts by seed, physics attributes."""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from safecert.envs import make_env
from safecert.envs.point_goal import SafePointGoalEnv
from safecert.errors import ConfigError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))
from vendors.point_policies import goal_seeker, hazard_avoider  # noqa: E402


def run(env, policy, seed):
    obs, _ = env.reset(seed=seed)
    positions, costs, info = [], [], {}
    done = False
    while not done:
        obs, _, term, trunc, info = env.step(policy(obs[None])[0])
        positions.append(obs[:2].copy())
        costs.append(info["cost"])
        done = term or trunc
    return np.array(positions), np.array(costs), info


def test_cost_is_one_exactly_inside_a_hazard_disc():
    env = make_env("SafePointGoal-v0", {"layout_seed": 1}, Path("."))
    positions, costs, info = run(env, goal_seeker, seed=0)
    lay = env.unwrapped.layout
    dist = np.linalg.norm(positions[:, None, :] - lay.hazards[None], axis=2).min(axis=1)
    np.testing.assert_array_equal(costs, (dist < env.unwrapped.hazard_radius).astype(float))
    assert costs.sum() > 0  # hazard 0 lies on the straight path
    assert info["is_success"]
    assert np.linalg.norm(positions[-1] - lay.goal) < env.unwrapped.goal_radius


def test_observation_layout():
    env = SafePointGoalEnv(layout_seed=2)
    obs, _ = env.reset(seed=5)
    lay = env.layout
    pos = obs[:2]
    np.testing.assert_allclose(obs[4:6], lay.goal - pos)
    np.testing.assert_allclose(obs[6:].reshape(-1, 2), lay.hazards - pos)
    assert env.observation_space.contains(obs)


def test_layouts_reproducible_and_differ_by_seed():
    a, b, c = (SafePointGoalEnv(layout_seed=s).layout for s in (7, 7, 8))
    np.testing.assert_array_equal(a.hazards, b.hazards)
    assert not np.allclose(a.goal, c.goal)
    env = SafePointGoalEnv(layout_seed=None)
    env.reset(seed=1)
    g1 = env.layout.goal.copy()
    env.reset(seed=2)
    assert not np.allclose(g1, env.layout.goal)
    env.reset(seed=1)
    np.testing.assert_array_equal(g1, env.layout.goal)


def test_randomize_layout_persists_across_reset():
    env = SafePointGoalEnv(layout_seed=0)
    new = env.randomize_layout(np.random.default_rng(123))
    env.reset(seed=0)
    assert env.layout is new


def test_mass_changes_the_dynamics():
    light, heavy = SafePointGoalEnv(), SafePointGoalEnv(mass=4.0)
    for env in (light, heavy):
        env.reset(seed=0)
        env.step(np.array([1.0, 0.0]))
    # one step from rest: dv = dt * force / mass
    assert light._vel[0] == pytest.approx(0.1) and heavy._vel[0] == pytest.approx(0.025)


def test_avoider_is_safer_than_seeker():
    env = gym.make("SafePointGoal-v0", layout_seed=None)
    seek = [run(env, goal_seeker, s)[1].sum() for s in range(20)]
    avoid = [run(env, hazard_avoider, s)[1].sum() for s in range(20)]
    assert np.mean(np.array(seek) > 0) == 1.0
    assert np.mean(np.array(avoid) > 0) < 0.4


def test_bad_env_is_config_error():
    with pytest.raises(ConfigError, match="^env: unknown environment"):
        make_env("NoSuchEnv-v9", {}, Path("."))
    with pytest.raises(ConfigError, match="mass"):
        make_env("SafePointGoal-v0", {"mass": -1}, Path("."))


def test_passes_gymnasium_env_checker_without_warnings():
    import warnings

    from gymnasium.utils.env_checker import check_env

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(SafePointGoalEnv(layout_seed=None), skip_render_check=True)
