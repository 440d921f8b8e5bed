"""The rollout's short cuts change no outcome.

- ``spec.cost`` that is one read of ``info`` is read without a scope (``EpisodeSpec.info_cost``):
  on every ``info`` it gives ``step_cost``'s value or leaves the step to ``step_cost``.
- ``gym.make``'s own layers (``TimeLimit``, ``OrderEnforcing``, ``PassiveEnvChecker``) are
  stepped past once the checker has checked its steps, the rollout applying the time limit
  itself: the records equal those of a hand loop through the whole chain, with a cost and a goal
  that read ``truncated`` on the step the time limit ends.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

from safecert.blackbox.config import RunConfig
from safecert.blackbox.jobs import EpisodeJob, episode_seed
from safecert.blackbox.rollout import run_lockstep
from safecert.blackbox.spec import compile_spec, step_scope
from safecert.expressions import EvalError, Read, parse

INFOS = [
    {"cost": 1.0},
    {"cost": 0.0, "other": 2},
    {"cost": -2.5},
    {"cost": 3},  # an int: step_cost makes it 3.0
    {"cost": True},
    {"cost": np.float64(0.5)},
    {"cost": float("nan")},
    {"cost": float("inf")},
    {"cost": "high"},
    {"cost": None},
    {"cost": [1.0]},
    {},
    {"other": 1.0},
]

COSTS = [
    "info:cost",
    'info["cost"]',
    "info['cost']",
    'info.get("cost", 0)',
    'info.get("cost", 2.5)',
    'info["cost"] + 0',
    'info.get("cost", 0) * 2',
    "obs[0]",
    "reward",
]


def _step_cost(cost: str, info: object) -> tuple[str, object]:
    spec = compile_spec(cost, "no_termination")
    try:
        return "value", spec.step_cost(step_scope(np.zeros(2), 0, 1.0, info, False, False, 0))  # type: ignore[arg-type]
    except EvalError as exc:
        return "error", exc.reason


@pytest.mark.parametrize("cost", COSTS)
def test_info_cost_is_step_cost_or_leaves_the_step_to_it(cost):
    spec = compile_spec(cost, "no_termination")
    fast = spec.info_cost
    if cost.startswith(("info:", "info[", "info.get")) and not cost.endswith(("+ 0", "* 2")):
        assert fast is not None
    else:
        assert fast is None
        return
    read = 0
    for info in INFOS:
        got = fast(info)
        kind, value = _step_cost(cost, info)
        if got is not None:
            read += 1
            assert kind == "value" and value == got and type(value) is type(got) is float
        # a value it leaves: step_cost decides (anything but a finite Python float read)
        elif kind == "value":
            value_read = info.get("cost") if "get" not in cost else info.get("cost", 0)
            assert not (type(value_read) is float and math.isfinite(value_read))
    assert read >= 3


def test_a_read_is_recognised_from_the_tokens_only():
    names = ("obs", "info", "reward")
    assert parse('info["k"]', "f", names=names).read == Read("info", "k")
    assert parse("obs[2]", "f", names=names).read == Read("obs", 2)
    assert parse('info.get("k", 1.5)', "f", names=names).read == Read("info", "k", 1.5)
    for text in ('info["k"][0]', 'info.get("k", -1)', "obs[1.5]", "reward", '(info["k"])'):
        assert parse(text, "f", names=names).read is None


def _config(max_steps: int | None, cost: str, goal: str) -> RunConfig:
    return RunConfig.model_validate(
        {
            "policy": "python:unused:act",
            "env": "CartPole-v1",
            "episodes": 7,
            "seed": 0,
            "max_steps": max_steps,
            "spec": {"budget": 1.0, "cost": cost, "goal": goal},
        }
    )


def _balance(obs: np.ndarray) -> np.ndarray:
    return (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)


def _hand(horizon: int, max_steps: int | None, episodes: int) -> list[tuple]:
    """(steps, terminated, truncated, cost, goal) per episode through the whole ``gym.make``
    chain, the cost counting ``truncated`` as the step returned it (before ``max_steps``) and
    the goal ``truncated and not terminated`` on the last step (after ``max_steps``)."""
    env = gym.make("CartPole-v1", max_episode_steps=horizon)
    out = []
    for i in range(episodes):
        obs, _ = env.reset(seed=episode_seed(0, 0, i))
        steps, cost = 0, 0.0
        while True:
            obs, _r, terminated, truncated, _info = env.step(int(_balance(obs[None])[0]))
            steps += 1
            cost += float(truncated)
            if max_steps is not None and steps >= max_steps and not terminated:
                truncated = True
            if terminated or truncated:
                break
        out.append((steps, terminated, truncated, cost, truncated and not terminated))
    return out


@pytest.mark.parametrize("copies", [1, 3])
@pytest.mark.parametrize(("horizon", "max_steps"), [(40, None), (40, 60), (40, 25), (60, 40)])
def test_stepping_past_the_time_limit_layers_keeps_every_record(copies, horizon, max_steps):
    episodes = 7
    envs = [gym.make("CartPole-v1", max_episode_steps=horizon) for _ in range(copies)]
    config = _config(max_steps, "truncated", "truncated and not terminated")
    jobs = [EpisodeJob(0, i, episode_seed(0, 0, i)) for i in range(episodes)]
    records = sorted(run_lockstep(envs, jobs, _balance, config), key=lambda r: r.index)
    got = [(r.steps, r.terminated, r.truncated, r.cost, r.goal) for r in records]
    assert got == _hand(horizon, max_steps, episodes)
    assert all(r.failure_reason is None for r in records)
    assert any(r.truncated for r in records)
    # the layers were stepped past after each copy's first episode: TimeLimit counted no steps
    # after its last reset, and its checker had checked its first two steps
    for env in envs:
        assert env._elapsed_steps == 0
        assert env.env.env.checked_step and env.env.env.checked_data_reuse


def test_an_environment_with_other_layers_is_stepped_whole():
    env = gym.wrappers.ClipReward(gym.make("CartPole-v1", max_episode_steps=30), -1, 1)
    config = _config(None, "truncated", "truncated")
    records = list(
        run_lockstep([env], [EpisodeJob(0, 0, 5), EpisodeJob(0, 1, 6)], _balance, config)
    )
    assert [r.steps for r in records] == [30, 30] and all(r.goal for r in records)
    assert env.env._elapsed_steps == 30  # the TimeLimit inside counted the steps itself
