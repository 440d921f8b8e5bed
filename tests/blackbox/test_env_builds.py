"""How often a one-episode run builds its environment (issue 28.3): the plan builds it once to
read its spaces, the pre-run check plays on that same, never-used copy, and the run's worker
builds its own — two builds, not three. An environment worker is never kept idle."""

from __future__ import annotations

import numpy as np

from safecert.blackbox import rollout
from safecert.blackbox.certify import certify
from safecert.blackbox.plan import plan_run
from tests.blackbox.pipeline_helpers import tiny_run


def test_a_one_episode_run_builds_its_environment_twice(tmp_path, monkeypatch):
    tiny_run(tmp_path, max_steps=20)
    built = []
    real = rollout.make_base_env

    def counted(config, base_dir):
        built.append(config.env)
        return real(config, base_dir)

    monkeypatch.setattr(rollout, "make_base_env", counted)
    cert = certify(tmp_path / "run.toml", tmp_path / "out", workers=1)
    assert cert.result.cells[0].episodes == 1
    assert built == ["CartPole-v1", "CartPole-v1"]  # the plan's (checked on), the worker's


def test_the_plans_environment_is_handed_over_once_and_unused(tmp_path):
    tiny_run(tmp_path, max_steps=20)
    plan = plan_run(tmp_path / "run.toml", keep_env=True)
    first = plan.fresh_base_env()
    second = plan.fresh_base_env()
    try:
        assert first is not second and not plan.unused_env
        a, _ = first.reset(seed=3)
        b, _ = second.reset(seed=3)
        assert np.array_equal(a, b)  # as good as a new one
    finally:
        first.close()
        second.close()


def test_a_plan_for_anything_but_a_run_keeps_no_environment_open(tmp_path, monkeypatch):
    """A report's or a replay's plan (no pre-run check to take it) closes its environment."""
    tiny_run(tmp_path, max_steps=20)
    closed = []
    real = rollout.make_base_env

    def recorded(config, base_dir):
        env = real(config, base_dir)
        close = env.close
        env.close = lambda: (closed.append(env), close())[1]
        return env

    monkeypatch.setattr(rollout, "make_base_env", recorded)
    plan = plan_run(tmp_path / "run.toml")
    assert not plan.unused_env and len(closed) == 1
