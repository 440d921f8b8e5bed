"""A policy worker asked to end before the certificate is written (``Channel.end``): its teardown
overlaps the run's last steps, it is reaped when the run closes, and a call after ``end`` gets a
fresh worker (issue 28, item 3)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import numpy as np
import pytest

from safecert import procs
from safecert.blackbox.oracles import make_oracle, parse_oracle_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

pytestmark = pytest.mark.skipif(not procs.SUPERVISED, reason="Linux supervisor")


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_an_ended_worker_is_reaped_by_close_and_a_later_call_starts_a_fresh_one():
    spec = parse_oracle_spec("python:vendors.cartpole_policies:balance", base_dir=EXAMPLES)
    oracle = make_oracle(spec)
    try:
        oracle.act(np.zeros((1, 4)))
        channel = oracle.channel
        first = channel._proc
        assert first is not None
        supervisor = first.pid
        channel.end()
        assert channel.pid is None  # no longer the channel's child (never pinned, never called)
        assert channel._ending == [first]
        assert oracle.act(np.zeros((1, 4))).shape == (1,)  # a fresh worker answers
        assert channel.restarts == 1
        assert channel._ending == []  # the ended one was reaped before the fresh one started
        assert first.poll() is not None and _gone(supervisor)
        second = channel._proc
        assert second is not None
        channel.end()
        channel.close()  # reaps what end asked to end
        assert second.poll() is not None and _gone(second.pid)
        assert channel._ending == [] and channel.pid is None
    finally:
        oracle.close()


def test_end_leaves_a_vendors_program_and_a_busy_worker_alone(tmp_path):
    """A vendor's ``exec:`` program keeps its polite close; a worker with a request in flight is
    not ended under it."""
    vendor = make_oracle(
        parse_oracle_spec(
            "exec:python3 vendors/exec_vendor.py --policy point:goal_seeker", base_dir=EXAMPLES
        )
    )
    spec = parse_oracle_spec("python:vendors.cartpole_policies:balance", base_dir=EXAMPLES)
    worker = make_oracle(spec)
    try:
        vendor.act(np.zeros((1, 14)))
        vendor.channel.end()
        assert vendor.channel.pid is not None
        worker.act(np.zeros((1, 4)))
        ticket = worker.channel.post(b'{"observations": [[0.0, 0.0, 0.1, 0.0]]}')
        worker.channel.end()
        assert worker.channel.pid is not None
        assert worker.channel.collect(ticket).startswith(b'{"actions"')
    finally:
        vendor.close()
        worker.close()


CONFIG = """
policy = "python:vendors.cartpole_policies:balance"
env = "SafeCartPole-v0"
episodes = 2
max_steps = 20
workers = 1
[spec]
budget = 1000.0
goal = "no_termination"
cost = "info:cost"
"""


def test_certify_ends_its_policy_worker_before_writing_the_certificate(tmp_path, monkeypatch):
    """In a run with an isolated policy, the worker is asked to end after the last episode and
    before the certificate is written, and nothing of it is left when ``certify`` returns."""
    from safecert.blackbox import certify as run
    from safecert.isolation import Channel

    (tmp_path / "vendors").symlink_to(EXAMPLES / "vendors")
    (tmp_path / "run.toml").write_text(textwrap.dedent(CONFIG))
    events: list[str] = []
    ended: list[procs.VendorProcess] = []
    real_end, real_finish = Channel.end, run.finish

    def end(self: Channel) -> None:
        events.append("end")
        if self._proc is not None:
            ended.append(self._proc)
        real_end(self)

    def finish(*args, **kwargs):
        events.append("finish")
        return real_finish(*args, **kwargs)

    monkeypatch.setattr(Channel, "end", end)
    monkeypatch.setattr(run, "finish", finish)
    cert = run.certify(tmp_path / "run.toml", tmp_path / "out")
    assert events == ["end", "finish"]
    assert (tmp_path / "out" / "certificate.json").is_file()
    assert sum(c.episodes for c in cert.result.cells) == 2
    assert len(ended) == 1 and ended[0].poll() is not None and _gone(ended[0].pid)
