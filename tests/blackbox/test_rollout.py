"""Batched lockstep rollouts: independent of B, failures recorded, goals and truncation."""

from __future__ import annotations

import numpy as np
import pytest

from safecert.blackbox.backends import LocalBackend, RunContext, Worker
from safecert.blackbox.jobs import EpisodeJob, make_jobs
from safecert.blackbox.oracles import make_oracle
from safecert.blackbox.plan import plan_run
from safecert.blackbox.rollout import build_cell_env, run_lockstep
from tests.blackbox.pipeline_helpers import cartpole_run, write_run


def _context(config_path, batch_size=1):
    plan = plan_run(config_path)
    config = plan.config.model_copy(update={"batch_size": batch_size})
    ranges = (9.6, 2.0, 0.84, 2.0)
    return plan, RunContext(config, str(plan.base_dir), plan.cells, ranges, plan.oracle)


def test_records_do_not_depend_on_batch_size_or_workers(tmp_path):
    plan, ctx1 = _context(cartpole_run(tmp_path, episodes=6))
    jobs = plan.all_jobs()
    one = sorted(LocalBackend(1).run(jobs, ctx1), key=lambda r: (r.cell, r.index))
    _, ctx4 = _context(cartpole_run(tmp_path), batch_size=4)
    four = sorted(LocalBackend(1).run(jobs, ctx4), key=lambda r: (r.cell, r.index))
    with LocalBackend(2, chunk_episodes=5) as two:
        two_workers = sorted(two.run(jobs, ctx4), key=lambda r: (r.cell, r.index))
        pool = two._pool
        again = sorted(two.run(jobs[:7], ctx4), key=lambda r: (r.cell, r.index))
        assert pool is not None and two._pool is pool  # one pool across calls
    assert two._pool is None  # closed on exit
    assert one == four == two_workers
    assert again == [r for r in one if (r.cell, r.index) in {(j.cell, j.index) for j in jobs[:7]}]
    assert len(one) == 4 * 6
    assert len({r.seed for r in one}) == len(one)
    # the perturbed cells really differ from the nominal one
    assert len({tuple(r.steps for r in one if r.cell == c) for c in range(4)}) > 1


def test_one_oracle_call_per_step_for_all_live_copies(tmp_path):
    plan, ctx = _context(cartpole_run(tmp_path), batch_size=3)
    calls = []
    oracle = make_oracle(plan.oracle)

    def policy(obs):
        calls.append(len(obs))
        return oracle.act(obs)

    envs = [
        build_cell_env(ctx.config, plan.base_dir, plan.cells[0], None, policy) for _ in range(3)
    ]
    jobs = make_jobs(0, 0, 5)
    records = list(run_lockstep(envs, jobs, policy, ctx.config))
    assert len(records) == 5
    assert max(calls) == 3 and sum(calls) == sum(r.steps for r in records)
    assert len(calls) < sum(r.steps for r in records)  # batched: fewer calls than steps


def test_failed_and_wrong_shaped_oracle_calls_end_episodes_as_failures(tmp_path):
    for name, why in (("flaky", "vendor crashed"), ("wrong_shape", "expected one integer action")):
        config = cartpole_run(tmp_path / name)
        text = config.read_text().replace("bbpipe_pol:cartpole", f"bbpipe_pol:{name}")
        config.write_text(text)
        plan, ctx = _context(config, batch_size=2)
        records = list(LocalBackend(1).run(make_jobs(0, 0, 4), ctx))
        assert len(records) == 4
        failed = [r for r in records if r.failure_reason]
        assert failed and all(why in r.failure_reason and not r.goal for r in failed)


def test_truncation_at_max_steps_is_not_a_failure(tmp_path):
    plan, ctx = _context(cartpole_run(tmp_path, max_steps=30))
    records = list(Worker(ctx).run(make_jobs(0, 0, 3)))
    assert all(r.steps == 30 and r.truncated and not r.terminated and r.goal for r in records)


POINT = """
policy = "python:bbpipe_pol:point_greedy"
env = "SafePointGoal-v0"
episodes = 4
max_steps = 120
[spec]
goal = "{goal}"
budget = 0.0
"""


@pytest.mark.parametrize("goal", ["info:is_success", "return>=0.5"])
def test_goal_definitions(tmp_path, goal):
    plan = plan_run(write_run(tmp_path, POINT.format(goal=goal)))
    ctx = RunContext(plan.config, str(plan.base_dir), plan.cells, None, plan.oracle)
    records = Worker(ctx).run([EpisodeJob(0, i, 1000 + i) for i in range(4)])
    for r in records:
        if goal.startswith("info"):
            assert r.goal == (r.terminated and r.steps < 120)
        else:
            assert r.goal == (r.ret >= 0.5)
    assert any(r.goal for r in records)
    assert np.all([r.cost >= 0 for r in records])
