"""Issue 28.2, per-step work: the rollout's cheaper paths change no outcome.

- A fresh copy's first episode steps ``gym.make``'s layers only until the environment checker
  has checked its two steps, then the environment below them (``_Layers.attach``), with the
  same records as the whole chain.
- ``BoxBatch`` accepts a batch of a box whose every dimension has the same bounds by its
  minimum and maximum (Python's up to ``SMALL_SAME`` values, numpy's beyond): exactly when every
  value is inside, NaN, infinities and overflowing sums included.
- The rollout reads a ``spec.cost`` of one ``info`` key inline (``EpisodeSpec.info_read``):
  each step's cost, or the failure, is what ``step_cost`` gives on that step's scope.
- The policy worker's request lines (``worker.requests``, which polls before it sleeps) are
  those of a plain read, however the bytes arrive.
"""

from __future__ import annotations

import io
import math
import os
import threading
import time

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st

from safecert.blackbox.actions import BoxBatch
from safecert.blackbox.config import RunConfig
from safecert.blackbox.jobs import EpisodeJob, episode_seed
from safecert.blackbox.oracles.worker import requests
from safecert.blackbox.rollout import run_lockstep
from safecert.blackbox.spec import compile_spec, step_scope
from safecert.expressions import EvalError


def _config(cost: str = "info:cost", max_steps: int | None = None) -> RunConfig:
    return RunConfig.model_validate(
        {
            "policy": "python:unused:act",
            "env": "CartPole-v1",
            "episodes": 4,
            "seed": 0,
            "max_steps": max_steps,
            "spec": {"budget": 1.0, "cost": cost, "goal": "not terminated"},
        }
    )


def _balance(obs: np.ndarray) -> np.ndarray:
    return (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)


def test_a_fresh_copy_steps_the_layers_only_until_they_are_checked():
    envs = [gym.make("CartPole-v1", max_episode_steps=40) for _ in range(2)]
    jobs = [EpisodeJob(0, i, episode_seed(0, 0, i)) for i in range(2)]
    config = _config("truncated", None)
    records = list(run_lockstep(envs, jobs, _balance, config))
    assert sorted(r.steps for r in records) == [40, 40] and all(r.truncated for r in records)
    assert all(r.cost == 1.0 for r in records)  # the time limit's step, seen by the cost
    for env in envs:  # TimeLimit stepped the checker's two steps of the first episode, no more
        assert env._elapsed_steps == 2
        assert env.env.env.checked_step and env.env.env.checked_data_reuse


#: values a reply may hold: the bounds below and their neighbours, overflowing ones, non-finite
VALUES = st.one_of(
    st.sampled_from([-1.0, 1.0, -2.0, 2.0, 0.0, -0.0, 1e308, -1e308, math.inf, -math.inf]),
    st.just(math.nan),
    st.floats(-3, 3),
    st.floats(allow_nan=True, allow_infinity=True),
)
SAME = [(-1.0, 1.0), (-1e308, 1e308), (-math.inf, math.inf), (0.0, math.inf), (-0.0, 0.0)]


@settings(max_examples=300)
@given(st.sampled_from(SAME), st.integers(1, 3), st.integers(1, 14), st.data())
def test_a_box_with_the_same_bounds_accepts_exactly_the_batches_inside(box, width, rows, data):
    lo, hi = box
    space = spaces.Box(lo, hi, shape=(width,), dtype=np.float64)
    check = BoxBatch(space)
    assert check.same == (lo, hi)
    values = data.draw(st.lists(VALUES, min_size=width * rows, max_size=width * rows))
    actions = np.array(values, dtype=np.float64).reshape(rows, width)
    inside = bool(((actions >= space.low) & (actions <= space.high)).all())
    if np.isinf(actions).any() and np.isposinf(actions).any() and np.isneginf(actions).any():
        assert check.ok(actions) in (inside, False)  # a sum of inf and -inf may refuse it
    else:
        assert check.ok(actions) is inside


def test_a_box_of_mixed_bounds_is_compared_value_by_value():
    space = spaces.Box(np.array([-1.0, -2.0]), np.array([1.0, 2.0]), dtype=np.float64)
    check = BoxBatch(space)
    assert check.same is None
    assert check.ok(np.array([[0.5, 1.5]] * 20))
    assert not check.ok(np.array([[1.5, 0.5]] * 20))
    # float32 bounds widened to float64 are the same bounds
    assert BoxBatch(spaces.Box(-1.0, 1.0, shape=(6,), dtype=np.float32)).same == (-1.0, 1.0)


#: what a step's info may hold under "cost", and whether step_cost accepts it
INFOS = [
    {"cost": 1.0},
    {"cost": -2.5, "other": 2},
    {"cost": 3},
    {"cost": True},
    {"cost": np.float64(0.5)},
    {"cost": float("inf")},
    {"cost": float("nan")},
    {"cost": "high"},
    {},
]


class _Infos(gym.Env):
    """Steps whose info cycles through :data:`INFOS`, starting at the episode's seed."""

    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float64)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = int(seed or 0)
        return np.zeros(2), {}

    def step(self, action):
        self._t += 1
        info = dict(INFOS[self._t % len(INFOS)])
        return np.zeros(2), 1.0, False, self._t % 5 == 0, info


def test_the_inline_info_read_gives_step_costs_value_or_failure():
    for cost in ("info:cost", 'info.get("cost", 0.25)', 'info["cost"]'):
        spec = compile_spec(cost, "not terminated")
        assert spec.info_read is not None
        jobs = [EpisodeJob(0, i, i) for i in range(len(INFOS))]
        records = {
            r.index: r for r in run_lockstep([_Infos(), _Infos()], jobs, _zeros, _config(cost))
        }
        for i in range(len(INFOS)):
            total, why = 0.0, None
            for t in range(5 - i % 5):
                info = INFOS[(i + t + 1) % len(INFOS)]
                scope = step_scope(np.zeros(2), 0, 1.0, info, False, t + 1 == 5 - i % 5, t)
                try:
                    total += spec.step_cost(scope)
                except EvalError as exc:
                    why = f"spec: spec.cost: {exc.reason}"
                    break
            # a failed step ends the episode with the cost of the steps before it
            assert (records[i].cost, records[i].failure_reason) == (total, why), (cost, i)


def _zeros(obs: np.ndarray) -> np.ndarray:
    return np.zeros(len(obs), dtype=np.int64)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=8),
    st.booleans(),
    st.lists(st.integers(1, 30), min_size=1, max_size=6),
)
def test_the_workers_request_lines_are_those_of_a_plain_read(lines, last_open, cuts):
    data = b"".join(line + b"\n" for line in lines) + (b"tail" if last_open else b"")
    read, write = os.pipe()

    def feed() -> None:
        rest, k = data, 0
        while rest:
            n = cuts[k % len(cuts)]
            os.write(write, rest[:n])
            rest, k = rest[n:], k + 1
            if k % 3 == 0:
                time.sleep(0.002)  # past the poll: the reader sleeps in a blocking read
        os.close(write)

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        got = list(requests(read, poll_s=0.0005))
    finally:
        feeder.join()
        os.close(read)
    assert got == io.BytesIO(data).readlines()  # the lines a file read gives


def test_copies_share_a_space_exactly_when_gym_says_they_are_equal():
    from safecert.blackbox.rollout import _same_space

    box = spaces.Box(-1.0, 1.0, (6,), np.float32)
    cases = [
        spaces.Box(-1.0, 1.0, (6,), np.float32),
        spaces.Box(-1.0, 1.0 + 1e-12, (6,), np.float64),
        spaces.Box(-1.0, 1.0 + 1e-9, (6,), np.float32),  # allclose: equal for gym
        spaces.Box(-1.0, 2.0, (6,), np.float32),
        spaces.Box(-1.0, 1.0, (5,), np.float32),
        spaces.Box(-np.inf, np.inf, (6,), np.float32),
        spaces.Discrete(6),
    ]
    for other in cases:
        assert _same_space(box, other) is (other == box)
    assert _same_space(box, box)
    inf = spaces.Box(-np.inf, np.inf, (2,), np.float64)
    assert _same_space(inf, spaces.Box(-np.inf, np.inf, (2,), np.float64)) is True
    assert _same_space(spaces.Discrete(2), spaces.Discrete(2))
    assert not _same_space(spaces.Discrete(2), spaces.Discrete(3))
