"""safecert.isolation: what counts as loadable code, finding a module without running it, and
colocating a rollout with its workers."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from safecert.blackbox.oracles import make_oracle, parse_oracle_spec
from safecert.errors import ConfigError
from safecert.isolation import (
    MAX_CODE_FILES,
    colocated,
    listing_digest,
    loadable_code,
    locate_module,
)


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
