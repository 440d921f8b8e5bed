"""The envelope wrappers provably perturb what the policy sees / what the simulator does."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest

import safecert.envs  # noqa: F401  (registers SafePointGoal-v0)
from safecert.blackbox.adversary import ActionAdversary, ObservationAdversary, corner_signs
from safecert.blackbox.envelope import (
    ActionDelay,
    ActionNoise,
    LayoutRandomization,
    ObservationNoise,
    PhysicalShift,
    RandomDynamics,
)
from safecert.errors import ConfigError


class Executed(gym.Wrapper):
    """Innermost recorder: the actions the simulator really executed."""

    def __init__(self, env):
        super().__init__(env)
        self.actions = []

    def step(self, action):
        self.actions.append(copy.deepcopy(action))
        return self.env.step(action)


def _wrapper_rng(seed: int, tag: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(tag,)))


@pytest.mark.parametrize("kind", ["gaussian", "uniform"])
def test_observation_noise_matches_independent_draw(kind):
    ranges = np.array([2.0, 2.0, 16.0])
    env = ObservationNoise(gym.make("Pendulum-v1"), 0.1, ranges, kind)
    clean = gym.make("Pendulum-v1")
    obs, _ = env.reset(seed=7)
    ref, _ = clean.reset(seed=7)
    rng = _wrapper_rng(7, 1)
    draw = rng.standard_normal(3) if kind == "gaussian" else rng.uniform(-1, 1, 3)
    np.testing.assert_allclose(obs - ref, 0.1 * ranges * draw, atol=1e-12)
    for _ in range(5):
        obs, *_ = env.step(np.array([0.3]))
        ref, *_ = clean.step(np.array([0.3]))
        draw = rng.standard_normal(3) if kind == "gaussian" else rng.uniform(-1, 1, 3)
        np.testing.assert_allclose(obs - ref, 0.1 * ranges * draw, atol=1e-12)
    assert env.applied == 6 and not np.allclose(env.last, 0)
    if kind == "uniform":
        assert np.all(np.abs(env.last) <= 0.1 * ranges)


def test_action_noise_box_is_clipped_noise_on_the_executed_action():
    inner = Executed(gym.make("Pendulum-v1"))
    env = ActionNoise(inner, 0.2, "gaussian")
    env.reset(seed=3)
    rng = _wrapper_rng(3, 2)
    for a in (0.0, 1.9, -1.9):
        env.step(np.array([a]))
        expected = np.clip(a + 0.2 * 4.0 * rng.standard_normal(1), -2, 2)
        np.testing.assert_allclose(inner.actions[-1], expected)
    assert env.applied == 3


def test_discrete_actuation_noise_replaces_actions_with_probability_level():
    inner = Executed(gym.make("CartPole-v1"))
    env = ActionNoise(inner, 0.6)
    env.reset(seed=0)
    steps = replaced = 0
    for _ in range(400):
        _, _, term, trunc, _ = env.step(0)
        steps += 1
        replaced += inner.actions[-1] != 0
        if term or trunc:
            env.reset()
    # P(executed != 0) = 0.6 * 1/2 = 0.3; a 5-sigma band around it
    sd = np.sqrt(0.3 * 0.7 / steps)
    assert abs(replaced / steps - 0.3) < 5 * sd
    assert env.applied == replaced


def test_action_delay_executes_the_action_chosen_delay_steps_earlier():
    inner = Executed(gym.make("Pendulum-v1"))
    env = ActionDelay(inner, 2)
    env.reset(seed=0)
    chosen = [np.array([v]) for v in (0.5, -0.5, 1.0, -1.0)]
    for a in chosen:
        env.step(a)
    executed = [float(a[0]) for a in inner.actions]
    assert executed == [0.0, 0.0, 0.5, -0.5]
    env.reset(seed=1)
    env.step(np.array([1.5]))
    assert float(inner.actions[-1][0]) == 0.0  # the queue is cleared at reset


def test_physical_shift_scales_the_mujoco_model():
    base = gym.make("Hopper-v5")
    model = base.unwrapped.model
    mass, fric, damp = model.body_mass.copy(), model.geom_friction.copy(), model.dof_damping.copy()
    env = PhysicalShift(base, mass=1.25, friction=0.75, damping=1.5)
    np.testing.assert_allclose(model.body_mass, 1.25 * mass)
    np.testing.assert_allclose(model.geom_friction, 0.75 * fric)
    np.testing.assert_allclose(model.dof_damping, 1.5 * damp)
    assert set(env.applied) == {"mass", "friction", "damping"}
    # the shift changes the physics: same seed, same actions, different trajectory
    ref = gym.make("Hopper-v5")
    a = np.full(3, 0.5)
    env.reset(seed=0)
    ref.reset(seed=0)
    for _ in range(10):
        o1, *_ = env.step(a)
        o2, *_ = ref.step(a)
    assert not np.allclose(o1, o2)


def test_physical_shift_on_point_task_and_unsupported_env():
    env = PhysicalShift(gym.make("SafePointGoal-v0"), mass=0.75, friction=1.25)
    assert env.unwrapped.mass == pytest.approx(0.75) and env.unwrapped.friction == pytest.approx(
        0.625
    )
    with pytest.raises(ConfigError, match="damping"):
        PhysicalShift(gym.make("SafePointGoal-v0"), damping=1.25)
    with pytest.raises(ConfigError, match="mass"):
        PhysicalShift(gym.make("CartPole-v1"), mass=1.25)


def test_random_dynamics_draws_fresh_bounded_factors_per_episode():
    env = RandomDynamics(gym.make("SafePointGoal-v0"), 0.25)
    masses = []
    for seed in range(6):
        env.reset(seed=seed)
        masses.append(env.unwrapped.mass)
        factor = _wrapper_rng(seed, 3).uniform(0.75, 1.25)  # first draw = mass
        assert env.unwrapped.mass == pytest.approx(factor)
        assert env.last["mass"] == pytest.approx(factor)
    assert len(set(masses)) == 6 and all(0.75 <= m <= 1.25 for m in masses)
    env.reset(seed=2)
    assert env.unwrapped.mass == pytest.approx(masses[2])  # relative to nominal: no drift


def test_layout_randomisation_changes_layouts_by_seed():
    env = LayoutRandomization(gym.make("SafePointGoal-v0", layout_seed=0))
    hazards = []
    for seed in (0, 1, 0):
        env.reset(seed=seed)
        hazards.append(env.unwrapped.layout.hazards.copy())
    assert not np.allclose(hazards[0], hazards[1])
    np.testing.assert_array_equal(hazards[0], hazards[2])
    assert env.applied == 3
    with pytest.raises(ConfigError, match="layout"):
        LayoutRandomization(gym.make("CartPole-v1"))


def test_observation_adversary_picks_the_corner_that_moves_the_action_most():
    w = np.array([[1.0], [-2.0], [0.5]])

    def policy(obs):
        return np.tanh(np.asarray(obs) @ w)

    ranges = np.array([2.0, 2.0, 16.0])
    env = ObservationAdversary(gym.make("Pendulum-v1"), 0.05, ranges, policy, candidates=8)
    clean = gym.make("Pendulum-v1")
    obs, _ = env.reset(seed=4)
    ref, _ = clean.reset(seed=4)
    delta = obs - ref
    np.testing.assert_allclose(np.abs(delta), 0.05 * ranges)  # a corner of the L-inf box
    corners = 0.05 * ranges * corner_signs(np.random.default_rng(0), 3, 8)  # all 8 corners
    damage = [abs(policy((ref + c)[None]) - policy(ref[None])).item() for c in corners]
    assert abs(policy(obs[None]) - policy(ref[None])).item() == pytest.approx(max(damage))
    assert env.queries == 9 and env.applied == 1


def test_action_adversary_lookahead_leaves_the_simulator_untouched():
    env = ActionAdversary(gym.make("Hopper-v5"), 0.1, candidates=4)
    ref = gym.make("Hopper-v5")
    env.reset(seed=0)
    ref.reset(seed=0)
    for _ in range(5):
        obs, *_ = env.step(np.zeros(3))
        obs_ref, *_ = ref.step(np.asarray(env.last))  # what the adversary chose, executed cleanly
        np.testing.assert_allclose(obs, obs_ref, atol=1e-9)
    assert env.simulations == 20 and np.allclose(np.abs(env.last), 0.1 * 2.0)


def test_action_adversary_maximises_one_step_damage_on_the_point_task():
    env = ActionAdversary(gym.make("SafePointGoal-v0"), 0.2, candidates=4)
    env.reset(seed=1)
    before = copy.deepcopy(env.unwrapped)
    env.step(np.zeros(2))
    chosen = env.last
    best = -np.inf
    for signs in corner_signs(np.random.default_rng(0), 2, 4):
        _, r, _, _, info = copy.deepcopy(before).step(np.clip(0.2 * 2.0 * signs, -1, 1))
        best = max(best, info["cost"] - r)
    _, r, _, _, info = copy.deepcopy(before).step(chosen)
    assert info["cost"] - r == pytest.approx(best)


@pytest.mark.parametrize("level", [-0.1, 1.5])
def test_levels_outside_unit_interval_are_rejected(level):
    with pytest.raises(ConfigError, match=r"outside \[0, 1\]"):
        ObservationNoise(gym.make("Pendulum-v1"), level, np.ones(3))
    with pytest.raises(ConfigError, match=r"outside \[0, 1\]"):
        ActionNoise(gym.make("Pendulum-v1"), level)


def test_bad_arguments_are_config_errors():
    with pytest.raises(ConfigError, match="ranges"):
        ObservationNoise(gym.make("Pendulum-v1"), 0.1, np.ones(4))
    with pytest.raises(ConfigError, match="kind"):
        ObservationNoise(gym.make("Pendulum-v1"), 0.1, np.ones(3), "laplace")
    with pytest.raises(ConfigError, match="delay"):
        ActionDelay(gym.make("Pendulum-v1"), -1)
    with pytest.raises(ConfigError, match="Box"):
        ActionAdversary(gym.make("CartPole-v1"), 0.1)
