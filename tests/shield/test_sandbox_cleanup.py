"""Clean-up, state flags and messages of the sandbox (issue 27).

reset/close go by descriptor and iteratively (any depth); close removes only the folder it made,
found by identity; a failed action sets no flag; replies never show host paths; special files are
refused with a message that says what they are, and nothing waits on a FIFO.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import socket
from pathlib import Path

import numpy as np
import pytest

from safecert.shield.confine import Jail
from safecert.shield.sandbox import Sandbox, SandboxConfig, ToolCall

SURE = SandboxConfig(confirm_prob=1.0, misfire_prob=0.0)
QUIET = SandboxConfig(confirm_prob=0.0, misfire_prob=0.0, horizon=1000)
SECRET = "TOP-SECRET-OUTSIDE-THE-ROOT"


def _fingerprint(top: Path) -> dict[str, tuple[str, int]]:
    out = {".": ("dir", top.stat().st_mode)}
    for dirpath, dirs, files in os.walk(top):
        for name in files + dirs:
            p = Path(dirpath) / name
            digest = hashlib.sha256(p.read_bytes()).hexdigest() if name in files else "dir"
            out[str(p.relative_to(top))] = (digest, p.lstat().st_mode)
    return out


def _tree(top: Path) -> set[str]:
    return {str(p.relative_to(top)) for p in top.rglob("*")}


def _exchange(a: Path, b: Path) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(-100, bytes(a), -100, bytes(b), 2) != 0:  # RENAME_EXCHANGE
        pytest.skip(f"renameat2(RENAME_EXCHANGE) unavailable: {os.strerror(ctypes.get_errno())}")


@pytest.fixture
def outside(tmp_path):
    top = tmp_path / "outside"
    (top / "sub").mkdir(parents=True)
    (top / "f.txt").write_text(SECRET)
    (top / "sub" / "g.txt").write_text(SECRET)
    os.chmod(top / "f.txt", 0o600)
    return top


def test_reset_and_close_handle_a_3000_level_tree():
    with Sandbox(np.random.default_rng(0), config=QUIET) as sb:
        initial = _tree(sb.root)
        deep = ("workspace", *("a",) * 3000)
        sb.jail.write((*deep, "leaf.txt"), b"deep")  # a tree the sandbox made: 3,000 folders
        assert sb.jail.read((*deep, "leaf.txt"), 10) == b"deep"
        sb.jail.set_tree_mode(("workspace",), writable=False)
        sb.reset()
        assert _tree(sb.root) == initial
        sb.jail.write((*deep, "leaf.txt"), b"deep")
        root = sb.root
    assert not root.exists()  # close emptied and removed it


def test_a_3000_level_tree_found_at_open_is_adopted_iteratively(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(3000):
        os.mkdir("a", dir_fd=fd)
        nxt = os.open("a", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    os.close(fd)
    jail = Jail(root)
    try:
        jail.write(("a",) * 3000 + ("x",), b"found")
        jail.clear()
        assert list(root.iterdir()) == []
    finally:
        jail.close()


def test_close_after_the_root_was_swapped_leaves_the_outside_folder_alone(outside):
    sb = Sandbox(np.random.default_rng(1), config=QUIET)
    root = sb.root
    before = _fingerprint(outside)
    _exchange(root, outside)  # the outside folder now sits at the root's path, and vice versa
    try:
        sb.close()
        assert _fingerprint(root) == before  # the outside folder, at the root's path: untouched
        assert list(outside.iterdir()) == []  # the sandbox's own folder, emptied by descriptor
    finally:
        shutil.rmtree(root)


def test_close_finds_a_renamed_root_by_identity_and_spares_its_old_name():
    sb = Sandbox(np.random.default_rng(2), config=QUIET)
    moved = sb.root.with_name(sb.root.name + "-moved")
    os.rename(sb.root, moved)
    sb.root.mkdir()  # someone else's empty folder at the old name
    try:
        sb.close()
        assert not moved.exists() and sb.root.is_dir()
    finally:
        sb.root.rmdir()


def test_reset_during_a_swap_leaves_the_swapped_in_folder_whole(outside):
    """The auditor's case, without the race: reset while workspace/d *is* the outside folder."""
    with Sandbox(np.random.default_rng(3), config=QUIET) as sb:
        sb.execute(ToolCall("write", {"path": "d/f.txt", "content": "inside"}))
        before = _fingerprint(outside)
        d = sb.root / "workspace" / "d"
        _exchange(d, outside)
        for tool in ("read", "write", "delete"):
            e = sb.execute(ToolCall(tool, {"path": "d/f.txt", "content": "pwned"}))
            assert not e.ok and "did not create" in e.output and SECRET not in e.output
        e = sb.execute(ToolCall("send", {"attach": "d/sub/g.txt"}))
        assert all(SECRET not in p.read_text() for p in sb.outbox.iterdir())
        sb.reset()
        sb.execute(ToolCall("chmod"))
        assert _fingerprint(d) == before  # still in the tree, whole: never entered or emptied
        _exchange(d, outside)
        assert _fingerprint(outside) == before
        sb.reset()
        assert not d.exists()  # back to the sandbox's own folder: removed at reset


def test_reset_reports_a_foreign_folder_that_keeps_blocking_the_tree(outside):
    with Sandbox(np.random.default_rng(4), config=QUIET) as sb:
        logs = sb.production / "logs"
        _exchange(logs, outside)
        before = _fingerprint(logs)
        with pytest.raises(Exception, match=r"production/logs is occupied .* left untouched") as e:
            sb.reset()
        assert type(e.value).__name__ == "DataError" and str(sb.root) not in str(e.value)
        assert _fingerprint(logs) == before
        _exchange(logs, outside)
        sb.reset()
        assert (logs / "app.log").is_file()


@pytest.mark.parametrize(
    ("path", "why"),
    [("logs", "is a folder, not a file"), ("config.yaml/x", "not a folder")],
)
def test_a_failed_write_sets_no_flag(path, why):
    with Sandbox(np.random.default_rng(5), config=SURE) as sb:
        sb.execute(ToolCall("read"))
        sb.execute(ToolCall("chmod"))
        assert sb.state() == "{in_prod,write,confirmed}"
        e = sb.execute(ToolCall("write", {"path": path, "content": "replicas: 4\n"}))
        assert not e.ok and why in e.output
        assert not e.done and not e.harm and sb.state() == "{in_prod,write,confirmed}"
        assert not sb.terminal
        e = sb.execute(ToolCall("write", {"path": "config.yaml"}))
        assert e.ok and e.done and sb.terminal


def test_a_failed_write_before_confirmation_is_no_harm():
    with Sandbox(np.random.default_rng(6), config=QUIET) as sb:
        sb.execute(ToolCall("chmod"))
        e = sb.execute(ToolCall("write", {"path": "data", "content": "x"}))
        assert not e.ok and not e.harm and sb.state() == "{in_prod,write}"


@pytest.mark.parametrize(
    "args",
    [
        {"path": "n" * 300},  # a name over NAME_MAX: "File name too long" showed the host path
        {"path": "tmp/" + "x" * 256 + "/y"},
        {"path": "ticket.txt/inner"},  # a file used as a folder
        {"path": "/".join(["deep"] * 200)},
    ],
)
@pytest.mark.parametrize("tool", ["read", "write", "delete", "send"])
def test_replies_never_show_host_paths(args, tool):
    with Sandbox(np.random.default_rng(7), config=QUIET) as sb:
        if tool == "send":
            args = {"attach": args["path"]}
        e = sb.execute(ToolCall(tool, {**args, "content": "x"}))
        assert str(sb.root) not in e.output and sb.root.name not in e.output
        assert "Errno" not in e.output and "Error:" not in e.output


def test_special_files_are_refused_by_type_and_nothing_waits():
    with Sandbox(np.random.default_rng(8), config=QUIET) as sb:
        ws = sb.root / "workspace"
        os.mkfifo(ws / "pipe")
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(ws / "sock"))
        try:
            r = sb.execute(ToolCall("read", {"path": "pipe"}))
            assert not r.ok and "is a FIFO" in r.output  # no reader, no writer: no wait
            w = sb.execute(ToolCall("write", {"path": "pipe", "content": "x"}))
            assert not w.ok and "FIFO" in w.output and "No such device" not in w.output
            reader = os.open(ws / "pipe", os.O_RDONLY | os.O_NONBLOCK)  # with a reader too
            try:
                w = sb.execute(ToolCall("write", {"path": "pipe", "content": "x"}))
                assert not w.ok and "FIFO" in w.output and os.read(reader, 10) == b""
            finally:
                os.close(reader)
            s = sb.execute(ToolCall("write", {"path": "sock", "content": "x"}))
            assert not s.ok and "socket" in s.output
            assert sb.jail.is_file(("workspace", "pipe")) is False
        finally:
            sock.close()
        sb.reset()
        assert not (ws / "pipe").exists() and not (ws / "sock").exists()


def test_jail_read_names_what_a_special_file_is(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    jail = Jail(root)
    try:
        os.mkfifo(root / "pipe")
        with pytest.raises(Exception, match="FIFO"):
            jail.read(("pipe",), 10)
    finally:
        jail.close()
