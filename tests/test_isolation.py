"""safecert.isolation: what counts as loadable code, finding a module without running it,
colocating a rollout with its workers, and workers whose code attacks its supervisor."""

from __future__ import annotations

import fcntl
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from safecert import procs
from safecert.blackbox.oracles import make_oracle, parse_oracle_spec
from safecert.errors import ConfigError
from safecert.isolation import (
    MAX_CODE_FILES,
    Channel,
    ChannelFailure,
    colocated,
    has_own_cpu,
    listing_digest,
    loadable_code,
    locate_module,
)
from tests.blackbox.hostile import VENDOR, new_tag, tagged, wait_until
from tests.test_procs import contained_here


def _tree(root: Path, files: list[str]) -> None:
    for name in files:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("raise SystemExit('must not run')\n")


def test_loadable_code_is_what_import_can_reach(tmp_path):
    _tree(
        tmp_path,
        [
            "pol.py",
            "pkg/__init__.py",
            "pkg/sub.py",
            "ns/mod.py",  # a namespace package
            "pkg/__pycache__/sub.cpython-311.pyc",
            "ext.cpython-311-x86_64-linux-gnu.so",
            "notes.txt",
            "bad-name.py",  # not an identifier: import cannot name it
            "my-dir/x.py",  # nor a folder like this
            ".venv/lib/y.py",
        ],
    )
    found = {p.relative_to(tmp_path).as_posix() for p in loadable_code(tmp_path)}
    assert found == {
        "pol.py",
        "pkg/__init__.py",
        "pkg/sub.py",
        "ns/mod.py",
        "pkg/__pycache__/sub.cpython-311.pyc",
        "ext.cpython-311-x86_64-linux-gnu.so",
    }
    before = listing_digest(tmp_path)
    (tmp_path / "pkg" / "added.py").write_text("")
    assert listing_digest(tmp_path) != before


def test_too_much_code_is_one_config_error(tmp_path, monkeypatch):
    monkeypatch.setattr("safecert.isolation.MAX_CODE_FILES", 3)
    _tree(tmp_path, [f"m{i}.py" for i in range(5)])
    with pytest.raises(ConfigError, match="more than 3 files Python can import"):
        loadable_code(tmp_path)
    assert MAX_CODE_FILES >= 1000


def test_locate_module_runs_no_code(tmp_path):
    _tree(tmp_path, ["pkg/__init__.py", "pkg/inner/__init__.py", "pkg/inner/pol.py"])
    found = locate_module("pkg.inner.pol", tmp_path)
    assert found == tmp_path / "pkg" / "inner" / "pol.py"
    assert "pkg" not in sys.modules  # the package __init__ (which raises) never ran
    assert locate_module("pkg.nope", tmp_path) is None
    assert locate_module("json", tmp_path) is not None  # the standard library is found too


def test_colocated_pins_the_thread_and_the_workers_then_restores(tmp_path, monkeypatch):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: nothing to colocate")
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))  # our own CPU locks
    before = os.sched_getaffinity(0)
    examples = Path(__file__).resolve().parents[1] / "examples"
    policy = make_oracle(
        parse_oracle_spec("python:vendors.cartpole_policies:balance", base_dir=examples)
    )
    vendor = make_oracle(
        parse_oracle_spec(
            "exec:python3 vendors/exec_vendor.py --policy point:goal_seeker", base_dir=examples
        )
    )
    try:
        with colocated():
            pinned = os.sched_getaffinity(0)
            assert len(pinned) == 1
            policy.act(np.zeros((1, 4)))  # started inside: pinned at start
            assert os.sched_getaffinity(policy.channel.pid) == pinned
            vendor.act(np.zeros((1, 14)))
            assert os.sched_getaffinity(vendor.channel.pid) == before  # exec: keeps every CPU
        assert os.sched_getaffinity(0) == before
        assert os.sched_getaffinity(policy.channel.pid) == before
    finally:
        policy.close()
        vendor.close()


ATTACKER = """
import signal, sys
import numpy as np
sys.path.insert(0, {vendors!r})
import hostile_vendor
hostile_vendor.attack(signal.SIG{sig})
hostile_vendor.leave_children()
hostile_vendor.leave_chain(3)


def act(obs):
    return (np.atleast_2d(obs)[:, 2] > 0).astype(np.int64)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("contain", [True, False], ids=["contained", "uncontained"])
@pytest.mark.parametrize("sig", ["KILL", "STOP"])
def test_a_policy_worker_whose_code_attacks_its_supervisor_leaves_nothing(
    tmp_path, monkeypatch, sig, contain
):
    """``python:`` policy code runs in a policy worker under the supervisor: code that SIGKILLs
    or SIGSTOPs that supervisor on import and leaves a ``setsid`` child, a daemon and a chain of
    double forks behind is still cleared when the oracle closes (uncontained: by the subreaper
    sweep of :func:`procs.reaping`). The folder's unique name is on every such process's argv."""
    folder = tmp_path / new_tag()
    folder.mkdir()
    (folder / "attacker.py").write_text(ATTACKER.format(vendors=str(VENDOR.parent), sig=sig))
    monkeypatch.setattr(procs, "CONTAIN", contain)
    tag = str(folder)
    with procs.reaping():
        oracle = make_oracle(parse_oracle_spec("python:attacker:act", base_dir=folder))
        try:
            assert oracle.act(np.zeros((1, 4))).tolist() == [0]
            assert oracle.channel._proc.contained == (contain and contained_here())
            # worker, setsid child, daemon, end of chain (+ supervisor and pid 1 when contained)
            assert wait_until(lambda: len(tagged(tag)) >= 4), tagged(tag)
            assert oracle.act(np.ones((1, 4))).tolist() == [1]  # a restarted worker after KILL
        finally:
            oracle.close()
        assert wait_until(lambda: tagged(tag) == [], timeout=2.0), tagged(tag)
    assert tagged(tag) == []


ECHO = "import sys, time\nfor line in sys.stdin:\n    time.sleep({sleep})\n    {extra}\n    print(line.strip(), flush=True)\n"


def _echo(tmp_path: Path, sleep: float, timeout_s: float, extra: str = "pass") -> Channel:
    (tmp_path / "echo.py").write_text(ECHO.format(sleep=sleep, extra=extra))
    return Channel(
        (sys.executable, str(tmp_path / "echo.py")), cwd=str(tmp_path), timeout_s=timeout_s
    )


def test_posted_requests_are_answered_in_order_each_within_its_own_deadline(tmp_path):
    """Five requests posted at once to a child that takes 0.3 s each: the last reply comes
    1.5 s after its posting, yet each is within its 0.8 s deadline, which runs from when the
    child can have started on it; replies read on the way are kept for their own collect, a
    round trip in between included."""
    channel = _echo(tmp_path, 0.3, 0.8)
    try:
        tickets = [channel.post(b"%d" % k) for k in range(5)]
        assert channel.round_trip(b"last") == b"last"  # reads the five replies before it
        assert [channel.collect(t) for t in reversed(tickets)] == [b"4", b"3", b"2", b"1", b"0"]
        with pytest.raises(ValueError, match="never posted or was collected"):
            channel.collect(tickets[0])
        assert channel.restarts == 0
    finally:
        channel.close()


def test_a_failure_fails_its_request_and_a_fresh_child_answers_those_behind_it(tmp_path):
    """A request that kills the child fails alone: the ones posted behind it, which that child
    never answered, go to a fresh child, as they would have had the caller waited."""
    channel = _echo(tmp_path, 0.0, 5.0, extra="if line.startswith('die'): raise SystemExit(4)")
    try:
        first = channel.post(b"fine")
        dying = channel.post(b"die")
        behind = [channel.post(b"after"), channel.post(b"die again"), channel.post(b"last")]
        assert channel.collect(behind[0]) == b"after"  # read past the failure
        with pytest.raises(ChannelFailure, match=r"exited \(exit code 4\)"):
            channel.collect(dying)
        assert channel.collect(first) == b"fine"
        assert channel.collect(behind[2]) == b"last"  # behind the second death: a third child
        with pytest.raises(ChannelFailure, match=r"exited \(exit code 4\)"):
            channel.collect(behind[1])
        assert channel.round_trip(b"again") == b"again" and channel.restarts == 2
    finally:
        channel.close()


def test_a_hung_child_fails_its_request_at_the_deadline(tmp_path):
    channel = _echo(tmp_path, 0.0, 0.5, extra="if line.startswith('hang'): time.sleep(30)")
    try:
        assert channel.round_trip(b"started") == b"started"  # past the start-up grace
        hung, behind = channel.post(b"hang"), channel.post(b"b")
        with pytest.raises(ChannelFailure, match=r"no complete reply within 0.5s"):
            channel.collect(hung)
        assert channel.collect(behind) == b"b" and channel.restarts == 1
    finally:
        channel.close()


def test_colocated_gives_a_worker_apart_its_own_cpu(tmp_path, monkeypatch):
    """``apart``: that policy worker on a second CPU, the others with the thread; without a
    second CPU free, on the thread's CPU (and ``has_own_cpu`` says so)."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: nothing to colocate")
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))  # our own CPU locks
    before = os.sched_getaffinity(0)
    examples = Path(__file__).resolve().parents[1] / "examples"
    spec = parse_oracle_spec("python:vendors.cartpole_policies:balance", base_dir=examples)
    apart, other = make_oracle(spec), make_oracle(spec)
    try:
        apart.act(np.zeros((1, 4)))  # started before: pinned on entry
        with colocated(apart.channel):
            (mine,) = os.sched_getaffinity(0)
            assert has_own_cpu(apart.channel) and not has_own_cpu(other.channel)
            other.act(np.zeros((1, 4)))  # started inside: pinned at start
            (its,) = os.sched_getaffinity(apart.channel.pid)
            assert its != mine and os.sched_getaffinity(other.channel.pid) == {mine}
        assert not has_own_cpu(apart.channel)
        assert os.sched_getaffinity(apart.channel.pid) == before
        # every other CPU held by other runs: the worker stays with the thread
        held = [open(tmp_path / f"safecert-cpu-{os.getuid()}" / f"{c}.lock", "wb") for c in before]
        for fh in held[1:]:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held[0].close()
        with colocated(apart.channel):
            assert not has_own_cpu(apart.channel)
            assert os.sched_getaffinity(apart.channel.pid) == os.sched_getaffinity(0)
        for fh in held[1:]:
            fh.close()
    finally:
        apart.close()
        other.close()


@pytest.fixture
def descriptors_past_1024():
    """More than 1024 descriptors open in this process (the soft limit raised where needed), so
    the next ones opened are numbered 1024 and above: select(2) refuses those, poll(2) takes
    them. Closed and the limit put back after the test."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1300:
        pytest.skip(f"the hard limit on open files is {hard}: no descriptor reaches 1024")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1300), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_vendor_runs_and_ends_with_descriptors_numbered_past_1024(
    tmp_path, descriptors_past_1024
):
    """A judge holding many descriptors (the soft limit is often far above 1024: a gateway with
    many sessions, a run with many workers) still starts, talks to and ends its vendors: the
    supervisor's start report, the reply and the exit are waited for by poll(2)."""
    channel = _echo(tmp_path, 0.0, 5.0)
    try:
        assert channel.round_trip(b"beyond") == b"beyond"
        assert channel.round_trip(b"again") == b"again"
    finally:
        channel.close()
    assert channel.restarts == 0
