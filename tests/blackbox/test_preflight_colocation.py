"""The pre-run check takes turns with the policy worker on one CPU, as the run's episodes do
(:func:`safecert.blackbox.preflight.check_policy_and_spec`, issue 28.3): every policy call of
the health check and of the spec episode is made inside :func:`safecert.isolation.colocated`
when the policy runs in a worker, and none when it runs in process (nothing to meet)."""

from __future__ import annotations

import contextlib
import textwrap

import numpy as np
import pytest

from safecert import isolation
from safecert.blackbox.plan import plan_run
from safecert.blackbox.preflight import check_policy_and_spec

CONFIG = """
policy = "python:pol:act"
env = "CartPole-v1"
episodes = 1
max_steps = 20
{trust}
[spec]
budget = 100.0
goal = "no_termination"
cost = 'info.get("cost", 0)'
"""


class _Recording:
    """An oracle answering in this process that notes, per call, whether it came inside a
    colocated block."""

    def __init__(self, inside: list[bool]) -> None:
        self.inside = inside
        self.calls: list[bool] = []

    def probe(self, observations: np.ndarray) -> None:
        pass

    def act(self, observations: np.ndarray) -> np.ndarray:
        self.calls.append(bool(self.inside))
        return (np.asarray(observations)[:, 2] > 0).astype(np.int64)


@pytest.mark.parametrize("trust, colocated", [("", True), ('trust = "in-process"', False)])
def test_the_pre_run_check_meets_a_policy_worker_on_one_cpu(
    tmp_path, monkeypatch, trust, colocated
):
    (tmp_path / "pol.py").write_text("def act(obs):\n    return obs\n")
    (tmp_path / "run.toml").write_text(textwrap.dedent(CONFIG.format(trust=trust)))
    inside: list[bool] = []

    @contextlib.contextmanager
    def recording_colocated(apart=None):
        inside.append(True)
        try:
            yield
        finally:
            inside.pop()

    monkeypatch.setattr(isolation, "colocated", recording_colocated)
    plan = plan_run(tmp_path / "run.toml")
    assert plan.oracle.in_worker is colocated
    oracle = _Recording(inside)
    check_policy_and_spec(plan, oracle)  # type: ignore[arg-type]
    assert len(oracle.calls) > 2  # the health check and the spec episode's steps
    assert oracle.calls == [colocated] * len(oracle.calls)
    assert not inside  # the block ends with the check: the run claims its own CPU
