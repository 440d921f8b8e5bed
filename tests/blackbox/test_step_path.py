"""The rollout's short cuts change no outcome.

- ``spec.cost`` that is one read of ``info`` is recognised (``EpisodeSpec.info_read``), so the
  rollout reads it without a scope (its values: tests/blackbox/test_perstep_paths.py).
- ``gym.make``'s own layers (``TimeLimit``, ``OrderEnforcing``, ``PassiveEnvChecker``) are
  stepped past once the checker has checked its steps, the rollout applying the time limit
  itself: the records equal those of a hand loop through the whole chain, with a cost and a goal
  that read ``truncated`` on the step the time limit ends.
- A policy worker on a CPU of its own answers one half of the copies while the rollout steps the
  other (``run_lockstep``'s ``post``): the records equal those of waited calls, with failing
  calls, replies outside the action space, a batch of two rows a call, a policy called inside
  an environment's step while calls are in flight, and a run stopped early.
- A step's replies are accepted at once (``BoxBatch``, ``DiscreteBatch``) and checked finite
  (``all_finite``: a sum, then value by value only when the sum is not finite) with a few
  Python calls: the same answer as numpy's value-by-value comparison, NaN, infinities, bounds
  and overflowing sums included.
"""

from __future__ import annotations

import math
import textwrap

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import given
from hypothesis import strategies as st

from safecert.blackbox.actions import BoxBatch, DiscreteBatch
from safecert.blackbox.config import RunConfig
from safecert.blackbox.jobs import EpisodeJob, episode_seed
from safecert.blackbox.oracles import lockstep_calls, make_oracle, parse_oracle_spec
from safecert.blackbox.oracles.base import all_finite
from safecert.blackbox.rollout import run_lockstep
from safecert.blackbox.spec import compile_spec
from safecert.expressions import Read, parse

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


@pytest.mark.parametrize("cost", COSTS)
def test_one_read_of_info_is_recognised_and_nothing_else(cost):
    read = compile_spec(cost, "no_termination").info_read
    if cost.startswith(("info:", "info[", "info.get")) and not cost.endswith(("+ 0", "* 2")):
        assert read is not None and read[0] == "cost"
        assert read[1] == ({'info.get("cost", 0)': 0, 'info.get("cost", 2.5)': 2.5}.get(cost))
    else:
        assert read is None


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


#: a policy whose reply depends on its row only, with every per-call path: integer and float
#: replies, actions outside the space, a raise
MIXED = """
import numpy as np

def mixed(obs):
    obs = np.asarray(obs)
    act = (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)
    if obs[0, 1] < -0.3:
        raise RuntimeError("vendor crashed")
    if obs[0, 1] > 0.3:
        return act + 5  # outside Discrete(2)
    if obs[0, 0] > 0.02:
        return act.astype(float)
    return act
"""


class _AsksThePolicy(gym.Wrapper):
    """Calls the policy inside each step (as an observation adversary does), while the other
    half's calls are in flight to the same policy worker."""

    def __init__(self, env: gym.Env, act) -> None:
        super().__init__(env)
        self.act = act
        self.asked: list[int] = []

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.asked.append(int(np.asarray(self.act(np.asarray(obs, dtype=float)[None]))[0]))
        return obs, reward, terminated, truncated, info


@pytest.mark.parametrize(("copies", "batch"), [(6, 1), (7, 1), (6, 2), (5, 2)])
@pytest.mark.parametrize("asks", [False, True])
def test_posted_calls_give_the_records_of_waited_calls(tmp_path, copies, batch, asks):
    """Whole steps, halves in turn, halves posted ahead: the same records."""
    (tmp_path / "mixed_pol.py").write_text(textwrap.dedent(MIXED))
    oracle = make_oracle(parse_oracle_spec("python:mixed_pol:mixed", base_dir=tmp_path))
    config = _config(50, 'info.get("cost", 0)', "steps >= 30").model_copy(
        update={"batch_size": batch}
    )
    jobs = [EpisodeJob(0, i, episode_seed(3, 0, i)) for i in range(23)]
    try:
        in_flight: list[int] = []

        def post_calls(observations, size):
            reply = oracle.post_calls(observations, size)
            in_flight.append(len(oracle.channel._in_flight))
            return reply

        runs, asked = [], []
        for post, ahead in ((None, True), (post_calls, False), (post_calls, True)):
            envs = [gym.make("CartPole-v1", max_episode_steps=45) for _ in range(copies)]
            if asks:
                envs = [_AsksThePolicy(env, oracle.act) for env in envs]
            records = run_lockstep(
                envs,
                jobs,
                oracle.act,
                config,
                calls=lockstep_calls(oracle),
                post=post,
                ahead=ahead,
            )
            runs.append(sorted(records, key=lambda r: r.index))
            asked.append(sorted(sum((env.asked for env in envs), [])) if asks else [])
            if post is not None:
                assert max(in_flight) == (2 if ahead else 1)
                in_flight.clear()
        assert runs[0] == runs[1] == runs[2] and asked[0] == asked[1] == asked[2]
        reasons = {r.failure_reason.split(":")[0] for r in runs[0] if r.failure_reason}
        assert reasons == {"the policy failed the call", "action_out_of_space"}, reasons
        assert any(r.goal for r in runs[0]) and oracle.restarts == 0
    finally:
        oracle.close()


#: a policy whose worker dies on some rows
DEADLY = """
import os
import numpy as np

def act(obs):
    obs = np.asarray(obs)
    if obs[0, 1] < -0.3:
        os._exit(3)
    return (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)
"""


def test_a_worker_that_dies_fails_the_same_episodes_posted_ahead_or_not(tmp_path):
    (tmp_path / "deadly.py").write_text(textwrap.dedent(DEADLY))
    config = _config(50, 'info.get("cost", 0)', "steps >= 30")
    jobs = [EpisodeJob(0, i, episode_seed(3, 0, i)) for i in range(23)]
    runs, restarts = [], []
    for ahead in (False, True):
        oracle = make_oracle(parse_oracle_spec("python:deadly:act", base_dir=tmp_path))
        try:
            envs = [gym.make("CartPole-v1", max_episode_steps=45) for _ in range(6)]
            records = run_lockstep(
                envs,
                jobs,
                oracle.act,
                config,
                calls=lockstep_calls(oracle),
                post=oracle.post_calls,
                ahead=ahead,
            )
            runs.append(sorted(records, key=lambda r: r.index))
            restarts.append(oracle.restarts)
        finally:
            oracle.close()
    assert runs[0] == runs[1] and restarts[0] == restarts[1] > 0
    failed = [r for r in runs[0] if r.failure_reason]
    assert failed and all("exited (exit code 3)" in r.failure_reason for r in failed)
    assert any(not r.failure_reason for r in runs[0])


def test_a_posted_run_stopped_early_leaves_the_worker_in_step(tmp_path):
    """A consumer that stops after the first record: the calls in flight are read, so the next
    call gets its own reply."""
    (tmp_path / "pol.py").write_text(textwrap.dedent(MIXED).replace("def mixed", "def act"))
    oracle = make_oracle(parse_oracle_spec("python:pol:act", base_dir=tmp_path))
    config = _config(None, "0", "steps > 0")
    envs = [gym.make("CartPole-v1", max_episode_steps=20) for _ in range(4)]
    jobs = [EpisodeJob(0, i, i) for i in range(8)]
    try:
        run = run_lockstep(
            envs, jobs, oracle.act, config, calls=lockstep_calls(oracle), post=oracle.post_calls
        )
        first = next(run)
        run.close()
        assert first.steps > 0
        assert oracle.act(np.array([[0.0, 0.0, 0.5, 0.0], [0.0, 0.0, -0.5, 0.0]])).tolist() == [
            1,
            0,
        ]
    finally:
        oracle.close()


SLEEPY_RUN = """
policy = "python:sleepy:act"
env = "CartPole-v1"
episodes = 6
seed = 2
max_steps = 12
[spec]
budget = 0.0
p_star = 0.5
cost = "0"
goal = "steps >= 1"
"""


#: the policy of :data:`SLEEPY_RUN`: it sleeps 2 ms a call (so its worker keeps the rollout
#: waiting longer than it computes)
SLEEPY_POLICY = (
    "import time\nimport numpy as np\n\ndef act(obs):\n    time.sleep(0.002)\n"
    "    return (np.asarray(obs)[:, 2] > 0).astype(np.int64)\n"
)


def sleepy_run(tmp_path, monkeypatch, policy: str = SLEEPY_POLICY):
    """The plan and run context of :data:`SLEEPY_RUN` with ``policy`` as ``sleepy.py`` (CPU
    locks of the test's own); skipped on one CPU."""
    import os
    import tempfile

    from safecert.blackbox.backends import RunContext
    from safecert.blackbox.plan import plan_run
    from tests.blackbox.pipeline_helpers import write_run

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: no CPU of its own for the policy worker")
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))  # our own CPU locks
    (tmp_path / "sleepy.py").write_text(policy)
    plan = plan_run(write_run(tmp_path, SLEEPY_RUN))
    return plan, RunContext(plan.config, str(plan.base_dir), plan.cells, None, plan.oracle)


def test_a_run_that_waits_longer_than_its_worker_works_takes_turns_again(tmp_path, monkeypatch):
    """A policy worker on its own CPU that keeps the rollout waiting longer than it computes
    (here: it sleeps) is brought back to the rollout's CPU after the run's chunk, and the next
    chunks wait for each half's calls; the records are the same either way."""
    from safecert.blackbox import rollout
    from safecert.blackbox.backends import LocalBackend
    from safecert.isolation import has_own_cpu

    plan, ctx = sleepy_run(tmp_path, monkeypatch)
    posting: list[bool] = []  # per chunk: were its calls posted ahead?
    real = rollout.run_lockstep

    def counted(*args, **kwargs):
        assert kwargs["post"] is not None  # in halves either way
        posting.append(kwargs["ahead"])
        return real(*args, **kwargs)

    monkeypatch.setattr(rollout, "run_lockstep", counted)
    runs = []
    with LocalBackend(1) as backend:
        for _ in range(2):
            runs.append(sorted(backend.run(plan.all_jobs(), ctx), key=lambda r: r.index))
            worker = backend._worker
            assert worker is not None and worker.apart is not None
            if not posting[0]:
                pytest.skip("another run holds the other CPU")
            assert not has_own_cpu(worker.apart)
    assert posting == [True, False]  # the second run waited for each half's calls
    assert runs[0] == runs[1] and all(r.steps == 12 for r in runs[0])


def test_a_lone_runs_policy_worker_steps_more_copies(tmp_path):
    """K for the only worker of a run with a policy worker is LOCKSTEP_APART (its halves cover
    the worker's wake-up on another CPU); in process, in a pool and sequential as before."""
    from dataclasses import replace

    from safecert.blackbox.backends import (
        LOCKSTEP_APART,
        LOCKSTEP_DEFAULT,
        RunContext,
        episodes_per_worker,
        lockstep,
    )
    from safecert.blackbox.plan import plan_run
    from tests.blackbox.pipeline_helpers import write_run

    (tmp_path / "sleepy.py").write_text("def act(obs):\n    return obs[:, 0] > 0\n")
    plan = plan_run(write_run(tmp_path, SLEEPY_RUN.replace("[spec]", "batch_size = 2\n[spec]")))
    ctx = RunContext(plan.config, str(plan.base_dir), plan.cells, None, plan.oracle)
    assert LOCKSTEP_APART == 64 and LOCKSTEP_DEFAULT == 16
    assert lockstep(ctx, alone=True) == 64 and episodes_per_worker(ctx, alone=True) == 128
    assert lockstep(ctx) == 16
    in_process = replace(ctx, oracle=replace(ctx.oracle, trust="in-process"))
    assert lockstep(in_process, alone=True) == 16
    assert lockstep(replace(ctx, sequential=True), alone=True) == 1


#: values a reply may hold: the bounds below and their neighbours, overflowing ones, non-finite
VALUES = st.one_of(
    st.sampled_from([-1.0, 1.0, -2.0, 2.0, 0.0, -0.0, 1e308, -1e308, math.inf, -math.inf]),
    st.just(math.nan),
    st.floats(-3, 3),
    st.floats(allow_nan=True, allow_infinity=True),
)
BOXES = [
    (np.full(3, -1.0), np.full(3, 1.0)),
    (np.full(3, -2e308 / 2), np.full(3, 1e308)),
    (np.array([-1.0, -2.0, -1.0]), np.array([1.0, 2.0, 1.0])),
    (np.full(3, -np.inf), np.full(3, np.inf)),
    (np.full(3, 0.0), np.full(3, np.inf)),
]


@given(st.sampled_from(BOXES), st.integers(1, 4), st.data())
def test_a_batch_is_accepted_at_once_exactly_when_every_value_is_inside(box, rows, data):
    low, high = box
    space = spaces.Box(low, high, dtype=np.float64)
    values = data.draw(st.lists(VALUES, min_size=3 * rows, max_size=3 * rows))
    actions = np.array(values, dtype=np.float64).reshape(rows, 3)
    inside = bool(((actions >= low) & (actions <= high)).all())
    assert BoxBatch(space).ok(actions) is inside


@given(st.lists(st.integers(-3, 6), max_size=8), st.integers(-2, 2), st.integers(1, 4))
def test_a_discrete_batch_is_accepted_exactly_when_every_action_is_inside(rows, start, n):
    space = spaces.Discrete(n, start=start)
    got = DiscreteBatch(space).actions(np.array(rows, dtype=np.int64))
    expected = rows if all(start <= a < start + n for a in rows) else None
    assert got == expected


@given(st.lists(VALUES, max_size=300))
def test_all_finite_is_every_value_finite(values):
    arr = np.array(values, dtype=np.float64)
    assert all_finite(arr) is bool(np.isfinite(arr).all())
    assert all_finite(np.array([1e308] * 4)) is True  # the sum overflows, every value is finite
