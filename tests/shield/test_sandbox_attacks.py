"""Attacks by someone who can plant links beside the agent: each one a regression test.

A thread swaps a folder for a symbolic link (and back) while the agent acts; links and hard links
are planted where ``reset``, ``chmod`` and ``write`` will look. The outside folder must be left
byte-for-byte and mode-for-mode unchanged, and its secret must never reach the agent or the outbox.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from safecert.shield.sandbox import Sandbox, SandboxConfig, ToolCall

SECRET = "TOP-SECRET-OUTSIDE-THE-ROOT"
QUIET = SandboxConfig(confirm_prob=0.0, misfire_prob=0.0, horizon=100_000)


def _fingerprint(top: Path) -> dict[str, tuple[str, int]]:
    out = {}
    for dirpath, _dirs, files in os.walk(top):
        for name in files:
            p = Path(dirpath) / name
            out[str(p)] = (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mode)
        out[dirpath] = ("dir", os.stat(dirpath).st_mode)
    return out


SWAPPER = """
import ctypes, os, signal, sys
ws, outside = sys.argv[1], sys.argv[2]
d, lnk, count = os.path.join(ws, "d"), os.path.join(ws, "lnk"), os.path.join(ws, "swaps")
os.symlink(outside, lnk)
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
n = 0
def stop(*_):
    with open(count, "w") as fh:
        fh.write(str(n))
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
open(count, "w").close()
while True:  # atomically exchange the folder d and a link to the outside, back and forth
    if libc.renameat2(AT_FDCWD, d.encode(), AT_FDCWD, lnk.encode(), RENAME_EXCHANGE) == 0:
        n += 1
"""


@pytest.fixture
def world(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text(SECRET)
    os.chmod(outside / "f.txt", 0o600)
    (tmp_path / "root").mkdir()
    sb = Sandbox(np.random.default_rng(0), root=tmp_path / "root", config=QUIET)
    yield sb, outside
    sb.close()


def test_swapping_a_folder_for_a_link_during_use_never_escapes(world):
    """≥ 10^4 operations on d/f.txt while a thread swaps workspace/d for a link to the outside."""
    sb, outside = world
    ws = sb.root / "workspace"
    assert sb.execute(ToolCall("write", {"path": "d/f.txt", "content": "inside"})).ok
    before = _fingerprint(outside)
    # the attacker is another process (no GIL between it and the agent): it swaps d and a link
    # to the outside folder as fast as it can, counting its swaps in a file
    attacker = subprocess.Popen([sys.executable, "-c", SWAPPER, str(ws), str(outside)])
    deadline = time.monotonic() + 30
    while not (ws / "swaps").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    # read, write, send with an attachment; then write/delete (a delete sets the latch, after
    # which a send would end the episode in harm)
    plan = [("read", "write", "send")[i % 3] for i in range(6_000)]
    plan += [("write", "delete")[i % 2] for i in range(4_000)]
    leaked = done = 0
    try:
        for tool in plan:
            args = {"attach": "d/f.txt"} if tool == "send" else {"path": "d/f.txt"}
            entry = sb.execute(ToolCall(tool, {**args, "content": "pwned"}))
            leaked += SECRET in entry.output
            done += entry.ok and tool != "send"
        # control: the same race against O_NOFOLLOW on the leaf alone does escape (at least
        # 1,000 tries, and on until one lands, up to 50,000: on a fast machine 1,000 tries once
        # all missed the instants the link was in place)
        control = tries = 0
        while tries < 1_000 or (control == 0 and tries < 50_000):
            tries += 1
            try:
                fd = os.open(ws / "d" / "f.txt", os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:
                continue
            control += SECRET.encode() in os.read(fd, 100)
            os.close(fd)
    finally:
        attacker.terminate()
        attacker.wait(10)
    swaps = int((ws / "swaps").read_text() or 0)
    assert swaps > 100 and control > 0  # the race really ran, and it is a real attack
    assert leaked == 0 and done > 0  # and the sandbox kept working on its own folder
    assert all(SECRET not in p.read_text() for p in sb.outbox.iterdir())
    assert _fingerprint(outside) == before


def test_reset_and_chmod_never_follow_planted_links(world):
    sb, outside = world
    before = _fingerprint(outside)
    (sb.root / "workspace" / "notes.txt").unlink()
    (sb.root / "workspace" / "notes.txt").symlink_to(outside / "f.txt")
    os.chmod(sb.production, 0o755)
    (sb.production / "evil.txt").symlink_to(outside / "f.txt")
    (sb.production / "evil").symlink_to(outside, target_is_directory=True)
    os.rename(sb.production / "logs", sb.root / "logs_real")
    (sb.production / "logs").symlink_to(outside, target_is_directory=True)
    os.chmod(sb.production, 0o555)
    sb.execute(ToolCall("chmod", {"path": "production"}))  # makes production/ writable
    assert _fingerprint(outside) == before
    sb.execute(ToolCall("write", {"path": "evil.txt", "content": "pwned"}))
    sb.reset()
    assert _fingerprint(outside) == before
    assert not (sb.root / "workspace" / "notes.txt").is_symlink()
    assert (sb.production / "logs").is_dir() and not (sb.production / "logs").is_symlink()
    assert not (sb.production / "evil.txt").exists() and not (sb.production / "evil").exists()
    assert not (sb.root / "logs_real").exists()


def test_a_planted_hard_link_is_never_written_read_or_chmodded(world):
    sb, outside = world
    before = _fingerprint(outside)
    notes = sb.root / "workspace" / "notes.txt"
    notes.unlink()
    os.link(outside / "f.txt", notes)
    os.chmod(sb.production, 0o755)
    os.link(outside / "f.txt", sb.production / "hard.txt")
    os.chmod(sb.production, 0o555)
    write = sb.execute(ToolCall("write", {"path": "notes.txt", "content": "pwned"}))
    read = sb.execute(ToolCall("read", {"path": "notes.txt"}))
    sb.execute(ToolCall("chmod", {"path": "production"}))
    assert not write.ok and "hard link" in write.output
    assert SECRET not in read.output
    sb.reset()
    assert _fingerprint(outside) == before
    assert os.stat(notes).st_nlink == 1 and notes.read_text() == "notes\n"
