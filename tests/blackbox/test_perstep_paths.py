"""Issue 28.2, per-step work: the rollout's cheaper paths change no outcome.

- A fresh copy's first episode steps ``gym.make``'s layers only until the environment checker
  has checked its two steps, then the environment below them (``_Layers.attach``), with the
  same records as the whole chain.
- ``BoxBatch`` accepts a batch of a box whose every dimension has the same bounds by its
  minimum and maximum (Python's up to ``SMALL_SAME`` values, numpy's beyond): exactly when every
  value is inside, NaN, infinities and overflowing sums included.
- The rollout reads a ``spec.cost`` of one ``info`` key inline (``EpisodeSpec.info_read``):
  each step's cost, or the failure, is what ``step_cost`` gives on that step's scope.
- Copies of the action space are compared without ``allclose`` where that gives gym's answer.
- A MuJoCo velocity task built on a copy of its once-compiled model has the model and the
  steps, bit for bit, of Gymnasium's own build, and a model of its own.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st

from safecert.blackbox.actions import BoxBatch
from safecert.blackbox.config import RunConfig
from safecert.blackbox.jobs import EpisodeJob, episode_seed
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
    assert check.ok(actions) is inside  # both infinities in one batch included


def test_a_batch_holding_both_infinities_is_inside_an_unbounded_box():
    """Their sum is NaN, which the small path takes for a NaN: it compares value by value then."""
    check = BoxBatch(spaces.Box(-math.inf, math.inf, shape=(3,), dtype=np.float64))
    assert check.ok(np.array([[-1.0, math.inf, -math.inf]])) is True
    assert check.ok(np.array([[math.nan, math.inf, -math.inf]])) is False


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


@pytest.mark.parametrize("robot", ["HalfCheetah", "Hopper", "Ant"])
def test_a_copy_of_the_compiled_model_steps_as_a_fresh_compile(robot):
    from gymnasium.envs.mujoco.ant_v5 import AntEnv
    from gymnasium.envs.mujoco.half_cheetah_v5 import HalfCheetahEnv
    from gymnasium.envs.mujoco.hopper_v5 import HopperEnv

    from safecert.envs.velocity import _COMPILED, make_velocity_env

    cls = {"HalfCheetah": HalfCheetahEnv, "Hopper": HopperEnv, "Ant": AntEnv}[robot]
    fresh = cls()  # Gymnasium's own build: a compile of the XML
    a, b = make_velocity_env(robot), make_velocity_env(robot)
    assert type(a.unwrapped) is cls and "_initialize_simulation" not in vars(a.unwrapped)
    for name in ("body_mass", "geom_friction", "dof_damping", "actuator_ctrlrange"):
        assert getattr(a.unwrapped.model, name).tobytes() == getattr(fresh.model, name).tobytes()
    assert a.unwrapped.model.vis.global_.offwidth == fresh.model.vis.global_.offwidth
    # each environment has its own model: a physical shift of one changes no other
    master = _COMPILED[fresh.fullpath]
    b.unwrapped.model.body_mass[1] *= 2.0
    assert a.unwrapped.model.body_mass[1] == fresh.model.body_mass[1] == master.body_mass[1]
    rng = np.random.default_rng(3)
    actions = rng.uniform(-1.0, 1.0, (60, *fresh.action_space.shape))
    runs = []
    for env in (fresh, a.unwrapped):
        obs, _ = env.reset(seed=11)
        steps = [obs.tobytes()]
        for action in actions:
            obs, reward, terminated, _, info = env.step(action)
            steps.append((obs.tobytes(), reward, terminated, sorted(info.items())))
            if terminated:
                break
        runs.append(steps)
    assert runs[0] == runs[1]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=8),
    st.booleans(),
    st.lists(st.integers(1, 30), min_size=1, max_size=6),
    st.booleans(),
)
def test_the_workers_request_lines_are_those_of_a_plain_read(lines, last_open, cuts, polling):
    import io
    import os
    import threading
    import time

    from safecert.blackbox.oracles.worker import requests

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
        got = list(requests(read, [polling], poll_s=0.0005))
    finally:
        feeder.join()
        os.close(read)
    assert got == io.BytesIO(data).readlines()  # the lines a file read gives


def test_a_request_read_whole_is_handed_on_as_read():
    """One whole line a read (one round trip a step): the reader hands on the bytes it read,
    and a read holding a line and a part of the next still splits them."""
    import os
    import threading
    import time

    from safecert.blackbox.oracles.worker import requests

    writes = [b'{"a": 1}\n', b'{"b": 2}\n', b'{"c": 3}\n{"d"', b": 4}\n", b'{"e": 5}\n']
    read, write = os.pipe()

    def feed() -> None:
        for piece in writes:
            os.write(write, piece)
            time.sleep(0.01)  # each write read on its own
        os.close(write)

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        got = list(requests(read, [False]))
    finally:
        feeder.join()
        os.close(read)
    assert got == [b'{"a": 1}\n', b'{"b": 2}\n', b'{"c": 3}\n', b'{"d": 4}\n', b'{"e": 5}\n']


def test_a_worker_told_to_poll_answers_the_same(tmp_path):
    """The policy worker's replies do not depend on the polling signals, sent at any time (one
    that arrives before the worker has set its handlers is ignored: it is not killed)."""
    import json
    import subprocess
    import sys

    from safecert.blackbox.oracles.worker import POLL_OFF, POLL_ON

    (tmp_path / "pol.py").write_text(
        "import numpy as np\n\ndef act(obs):\n    return (np.asarray(obs)[:, 0] > 0).astype(int)\n"
    )
    requests = [
        json.dumps({"observations": [[0.5, 1.0], [-0.5, 2.0], [0.1, 0.0]], "calls": [1, 2]}),
        json.dumps({"observations": [[-1.0, 0.0]]}),
        json.dumps({"observations": [[2.0, 0.0], [0.0, 0.0]], "calls": [1, 1]}),
    ]

    def answers(signals: bool) -> list[bytes]:
        cmd = [sys.executable, "-I", "-B", "-m", "safecert.blackbox.oracles.worker"]
        proc = subprocess.Popen(
            [*cmd, "python", "pol:act", str(tmp_path), "1"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert proc.stdin is not None and proc.stdout is not None
        if signals:
            proc.send_signal(POLL_ON)  # perhaps before its handlers: ignored
        assert proc.stdout.readline() == b'{"ready":true}\n'
        out = []
        for k, request in enumerate(requests):
            if signals:
                proc.send_signal(POLL_ON if k != 1 else POLL_OFF)
            proc.stdin.write(request.encode() + b"\n")
            proc.stdin.flush()
            out.append(proc.stdout.readline())
        proc.stdin.close()
        assert proc.wait(10) == 0
        return out

    plain = answers(False)
    assert plain[0].startswith(b'{"calls":[{"actions":[1]}') and len(plain) == 3
    assert answers(True) == plain


def test_a_lone_run_tells_its_worker_to_poll_while_it_posts_ahead(tmp_path, monkeypatch):
    """Posting ahead, the run tells its policy worker to poll once the worker has answered, and
    to stop before it brings the worker back to its own CPU; a run that takes turns tells it
    nothing."""

    from safecert.blackbox import backends
    from safecert.blackbox.backends import LocalBackend
    from safecert.blackbox.oracles.worker import POLL_OFF, POLL_ON
    from tests.blackbox.test_step_path import sleepy_run

    plan, ctx = sleepy_run(tmp_path, monkeypatch)
    sent: list[tuple[int, int]] = []
    real = backends._signal
    monkeypatch.setattr(
        backends, "_signal", lambda pid, sig: (sent.append((pid, sig)), real(pid, sig))
    )
    with LocalBackend(1) as backend:
        list(backend.run(plan.all_jobs(), ctx))
        worker = backend._worker
        assert worker is not None and worker.apart is not None
        if not sent:
            pytest.skip("another run holds the other CPU")
        pid = worker.apart.pid
        assert sent == [(pid, POLL_ON), (pid, POLL_OFF)]  # the sleepy worker kept it waiting
        list(backend.run(plan.all_jobs(), ctx))  # on one CPU now: nothing more to tell
        assert sent == [(pid, POLL_ON), (pid, POLL_OFF)]


@pytest.mark.parametrize("episodes", [1, 2])
def test_a_lone_run_of_one_episode_keeps_its_policy_worker_on_its_cpu(
    tmp_path, monkeypatch, episodes
):
    """A lone run gives its policy worker a CPU of its own only when a cell has two episodes
    to step in halves; with one episode a cell the worker takes turns on the run's CPU (a round
    trip between two CPUs costs several times one on a CPU)."""
    import os

    from safecert.blackbox.backends import LocalBackend
    from safecert.blackbox.jobs import EpisodeJob, episode_seed
    from tests.blackbox.test_step_path import sleepy_run

    plan, ctx = sleepy_run(
        tmp_path,
        monkeypatch,
        "import os\nimport numpy as np\n\ndef act(obs):\n"
        "    with open('cpus.txt', 'a') as fh:\n"
        "        fh.write(repr(sorted(os.sched_getaffinity(0))) + '\\n')\n"
        "    return (np.asarray(obs)[:, 2] > 0).astype(np.int64)\n",
    )
    jobs = [EpisodeJob(0, i, episode_seed(plan.config.seed, 0, i)) for i in range(episodes)]
    judge = os.sched_getaffinity(0)
    seen: list[set[int]] = []
    with LocalBackend(1) as backend:
        records = list(backend.run(jobs, ctx))
        seen.append(os.sched_getaffinity(0))  # the run's thread, still colocated
    assert len(records) == episodes
    worker_cpus = {line for line in (tmp_path / "cpus.txt").read_text().splitlines()}
    (mine,) = seen[0]
    if episodes == 1:
        assert worker_cpus == {repr([mine])}  # on the run's CPU
    else:
        assert repr([mine]) not in worker_cpus  # a CPU of its own
    assert os.sched_getaffinity(0) == judge
