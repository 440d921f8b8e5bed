"""Lockstep batches for a policy in a policy worker (issue 28, item 2): a worker steps K episodes
together and sends the K calls of a step to the policy worker in ONE round trip, which calls the
policy on each row alone. The records are those of one episode at a time; a worker that dies
mid-step fails every call of that round trip, saying so; each call keeps its deadline."""

from __future__ import annotations

import textwrap
from dataclasses import replace

import numpy as np
import pytest

from safecert.blackbox.backends import (
    LocalBackend,
    RunContext,
    Worker,
    episodes_per_worker,
    lockstep,
)
from safecert.blackbox.config import certified_parameters
from safecert.blackbox.oracles import OracleFailure, make_oracle, parse_oracle_spec
from safecert.blackbox.plan import plan_run
from safecert.isolation import Channel
from tests.blackbox.pipeline_helpers import write_run

#: a policy whose reply depends on its row only, and whose calls differ in kind: integer and float
#: replies, actions outside the space, a raise — every per-call path of a lockstep step
MIXED = """
import numpy as np

def mixed(obs):
    obs = np.asarray(obs)
    act = (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)
    if abs(obs[0, 3]) > 0.45:
        raise RuntimeError("vendor crashed")
    if obs[0, 1] > 0.35:
        return act + 5  # outside Discrete(2)
    if obs[0, 0] > 0.02:
        return act.astype(float)  # 0.0 / 1.0: whole numbers of another dtype
    return act
"""

RUN = """
policy = "python:mixed_pol:mixed"
env = "CartPole-v1"
episodes = 14
seed = 11
max_steps = 60
[spec]
budget = 0.0
p_star = 0.5
cost = 'info.get("cost", 0)'
goal = "steps >= 40"
[envelope]
obs_noise = {{ kind = "gaussian", levels = [0.0, 0.3] }}
obs_ranges = "estimate"
reference_policy = "random"
"""


def _records(config_path, **update):
    plan = plan_run(config_path)
    config = plan.config.model_copy(update=update)
    ranges = (4.8, 6.0, 0.42, 6.0)
    ctx = RunContext(config, str(plan.base_dir), plan.cells, ranges, plan.oracle)
    with LocalBackend(1) as backend:
        records = sorted(backend.run(plan.all_jobs(), ctx), key=lambda r: (r.cell, r.index))
    return records, ctx


def test_lockstep_gives_the_records_of_one_episode_at_a_time(tmp_path, monkeypatch):
    (tmp_path / "mixed_pol.py").write_text(MIXED)
    config = write_run(tmp_path, RUN.format())
    trips: list[int] = []
    real = Channel.round_trip

    def counted(self, payload, timeout_s=None):
        trips.append(1)
        return real(self, payload, timeout_s)

    monkeypatch.setattr(Channel, "round_trip", counted)
    one, ctx1 = _records(config, lockstep=1)
    single_trips = len(trips)
    trips.clear()
    five, ctx5 = _records(config, lockstep=5)
    default, ctx16 = _records(config)
    assert lockstep(ctx1) == 1 and episodes_per_worker(ctx5) == 5
    assert lockstep(ctx16) == 16  # the default for a policy worker in a fixed-N run
    assert lockstep(replace(ctx16, sequential=True)) == 1  # sequential: no overshoot for speed
    in_process = replace(ctx16, oracle=replace(ctx16.oracle, trust="in-process"))
    assert lockstep(in_process) == 16  # a python: policy in process: the step's checks shared
    assert lockstep(replace(in_process, oracle=replace(in_process.oracle, kind="onnx"))) == 1
    # pinned to one CPU only with a policy or environment worker to meet there
    for ctx, pinned in ((ctx16, True), (in_process, False)):
        worker = Worker(ctx)
        try:
            assert worker.colocate is pinned
        finally:
            worker.close()
    assert one == five == default
    reasons = {r.failure_reason.split(":")[0] for r in one if r.failure_reason}
    assert reasons == {"the policy failed the call", "action_out_of_space"}, reasons
    assert any(not r.failure_reason for r in one) and any(r.goal for r in one)
    steps = sum(r.steps + 1 for r in one)  # a call per step, plus the failing ones
    assert single_trips >= steps - len(one)
    assert len(trips) < single_trips / 2  # lockstep: far fewer round trips
    # lockstep is execution-only: not in the certified parameters
    assert "lockstep" not in certified_parameters(ctx5.config)


@pytest.mark.parametrize(
    ("replies", "at_once"),
    [
        ([{"actions": [1]}, {"actions": [0]}, {"actions": [True]}], True),
        ([{"actions": [1.5]}, {"actions": [0.0]}], True),
        ([{"actions": [[0.5, 1.0]]}, {"actions": [[1.0, -2.0]]}], True),
        ([{"actions": [1]}, {"actions": [0.0]}], False),  # an int call and a float call
        ([{"actions": [[0.5, 1.0]]}, {"actions": [[1.0]]}], False),  # ragged
        ([{"actions": [2**63]}, {"actions": [1]}], False),  # beyond int64
        ([{"actions": [[]]}, {"actions": [[]]}], False),
        ([{"actions": [1, 2]}, {"actions": [3]}], False),  # a row too many
        ([{"actions": [None]}, {"actions": [1]}], False),
        ([{"error": "no"}, {"actions": [1]}], False),
        ([{"actions": [[[1]]]}, {"actions": [[[2]]]}], False),
    ],
)
def test_replies_checked_at_once_are_the_replies_checked_alone(replies, at_once):
    from safecert.blackbox.oracles.base import reply_actions, stacked
    from safecert.blackbox.oracles.exec_oracle import _same_rows

    sizes = [1] * len(replies)
    alone = []
    for doc, n in zip(replies, sizes, strict=True):
        try:
            alone.append(reply_actions(doc, n))
        except OracleFailure as exc:
            alone.append(exc)
    expected = stacked(alone, tuple(range(k, k + 1) for k in range(len(replies))))
    fast = _same_rows(replies, sizes)
    assert (fast is not None) == at_once
    if fast is not None:  # exactly what each check alone stacks to
        assert isinstance(expected, np.ndarray)
        assert fast.dtype == expected.dtype and fast.shape == expected.shape
        assert fast.tolist() == expected.tolist()


def _worker_oracle(tmp_path, body: str, timeout_s: float = 10.0):
    (tmp_path / "pol.py").write_text(textwrap.dedent(body))
    return make_oracle(parse_oracle_spec("python:pol:act", base_dir=tmp_path, timeout_s=timeout_s))


def test_a_worker_that_dies_mid_step_fails_every_call_of_the_round_trip(tmp_path):
    oracle = _worker_oracle(
        tmp_path,
        """
        import os
        import numpy as np

        def act(obs):
            if obs[0, 0] > 0.5:
                os._exit(3)
            return np.zeros(len(obs), dtype=np.int64)
        """,
    )
    try:
        obs = np.array([[0.0], [0.1], [0.9], [0.2]])
        results = oracle.act_calls(obs, 1)
        assert len(results) == 4 and all(isinstance(r, OracleFailure) for r in results)
        reasons = {r.reason for r in results}
        assert len(reasons) == 1
        (reason,) = reasons
        assert "exited (exit code 3)" in reason and "held 4 policy calls" in reason, reason
        # the next step starts a fresh worker, and a step without the deadly row is answered
        again = oracle.act_calls(np.array([[0.0], [0.1], [0.2]]), 2)
        assert isinstance(again, np.ndarray) and again.tolist() == [0, 0, 0]  # stacked
        assert oracle.restarts == 1
    finally:
        oracle.close()


def test_each_call_is_answered_alone(tmp_path):
    """A call's failure is its own: a raising call and a call holding a non-finite observation
    fail, the others are answered; a request that does not split its rows is refused."""
    oracle = _worker_oracle(
        tmp_path,
        """
        import numpy as np

        def act(obs):
            if len(obs) != 1:
                raise ValueError(f"{len(obs)} rows")
            if obs[0, 0] < 0:
                raise RuntimeError("negative")
            return obs * 2.0
        """,
    )
    try:
        obs = np.array([[1.0], [-1.0], [np.nan], [3.0]])
        results = oracle.act_calls(obs, 1)
        assert results[0].tolist() == [[2.0]] and results[3].tolist() == [[6.0]]
        assert (
            results[1].reason == "the policy failed the call: policy raised RuntimeError: negative"
        )
        assert results[2].reason == "observations contain non-finite values"
        assert oracle.channel.round_trip(b'{"observations": [[1.0]], "calls": [2]}') == (
            b'{"error":"bad request (ValueError)"}'
        )
    finally:
        oracle.close()


@pytest.mark.parametrize("slow", ["none", "one", "hang"])
def test_each_call_of_a_round_trip_keeps_its_own_deadline(tmp_path, slow):
    """Three calls of 0.1 s each fit their 0.5 s deadlines; a call of 0.7 s fails alone (as it
    would at K = 1), though the round trip's 3 × 0.5 s holds it; a call that hangs is killed at
    the round trip's deadline, failing all three."""
    oracle = _worker_oracle(
        tmp_path,
        f"""
        import time
        import numpy as np

        def act(obs):
            late = obs[0, 0] > 1
            time.sleep({{"none": 0.1, "one": 0.7, "hang": 30}}["{slow}"] if late else 0.1)
            return obs
        """,
        timeout_s=0.5,
    )
    try:
        oracle.probe()
        obs = np.array([[0.0], [2.0], [1.0]])
        results = oracle.act_calls(obs, 1)
        if slow == "hang":
            assert all(isinstance(r, OracleFailure) for r in results)
            assert "no complete reply within 1.5s" in results[0].reason
        elif slow == "one":
            assert isinstance(results[1], OracleFailure), results
            assert results[1].reason.startswith("no complete reply within 0.5s"), results[1]
            assert [r.tolist() for r in (results[0], results[2])] == [[[0.0]], [[1.0]]]
        else:
            assert results.tolist() == [[0.0], [2.0], [1.0]]
    finally:
        oracle.close()


def test_a_one_worker_run_starts_its_policy_worker_once(tmp_path, monkeypatch):
    """The pre-run check's policy worker runs the episodes too (one start, not two: a start is
    an interpreter, NumPy and the policy's import)."""
    from safecert.blackbox.certify import certify

    (tmp_path / "mixed_pol.py").write_text(MIXED)
    config = write_run(tmp_path, RUN.format().replace("episodes = 14", "episodes = 3"))
    starts: list[tuple[str, ...]] = []
    real = Channel._start

    def counted(self, **options):
        starts.append(self.argv)
        return real(self, **options)

    monkeypatch.setattr(Channel, "_start", counted)
    cert = certify(config, tmp_path / "out", workers=1, progress=False)
    policy_workers = [a for a in starts if "safecert.blackbox.oracles.worker" in a]
    assert len(policy_workers) == 1, starts
    assert sum(c.episodes for c in cert.result.cells) == 2 * 3  # the run did use it


def test_a_policy_worker_started_early_answers_its_first_call(tmp_path):
    """``start`` launches the worker without waiting (its start-up overlaps the caller's work);
    the first call reads its ready line, then is answered by that same process."""
    oracle = _worker_oracle(tmp_path, "def act(obs):\n    return obs * 2.0\n")
    try:
        oracle.start()
        pid = oracle.channel.pid
        assert pid is not None and oracle.channel.ready_line == b""
        assert oracle.act(np.ones((1, 1))).tolist() == [[2.0]]
        assert oracle.channel.pid == pid and oracle.restarts == 0
        assert oracle.channel.ready_line == b'{"ready":true}'
    finally:
        oracle.close()
