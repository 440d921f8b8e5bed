"""safecert.isolation: what counts as loadable code, finding a module without running it,
colocating a rollout with its workers, and workers whose code attacks its supervisor."""

from __future__ import annotations

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
    colocated,
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
