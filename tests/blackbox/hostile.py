"""Helpers for the deadline and process tests: the hostile vendor and a /proc census."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from safecert.blackbox.oracles import make_oracle, parse_oracle_spec

VENDOR = Path(__file__).with_name("hostile_vendor.py")


def new_tag() -> str:
    return f"hostile-{uuid.uuid4().hex[:12]}"


def tagged(tag: str) -> list[int]:
    """Live (non-zombie) processes whose command line carries ``tag`` — read from /proc."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                cmdline = fh.read()
            with open(f"/proc/{name}/stat", "rb") as fh:
                state = fh.read().rpartition(b")")[2].split()[0]
        except OSError:
            continue
        if tag.encode() in cmdline and state not in (b"Z", b"X"):
            found.append(int(name))
    return found


def cmdline(pid: int) -> list[bytes]:
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        return fh.read().split(b"\0")


def stat(pid: int) -> tuple[int, int, int]:
    """(ppid, pgid, sid) of a process, from /proc."""
    with open(f"/proc/{pid}/stat", "rb") as fh:
        ppid, pgid, sid = fh.read().rpartition(b")")[2].split()[1:4]
    return int(ppid), int(pgid), int(sid)


def supervisors(tag: str) -> list[int]:
    """Those of ``tagged(tag)`` that are safecert's vendor supervisor."""
    return [p for p in tagged(tag) if b"safecert/supervisor.py" in b" ".join(cmdline(p))]


def scrubbed(tag: str) -> list[int]:
    """Those of ``tagged(tag)`` that run with an empty environment (hostile_vendor --scrub)."""
    found = []
    for pid in tagged(tag):
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if fh.read() == b"":
                    found.append(pid)
        except OSError:
            continue
    return found


def wait_until(predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def exec_policy(*args: str) -> str:
    return f"exec:{sys.executable} {VENDOR} {' '.join(args)}"


def exec_oracle(*args: str, timeout_s: float = 10.0, retries: int = 3):
    spec = parse_oracle_spec(
        exec_policy(*args), base_dir=VENDOR.parent, timeout_s=timeout_s, retries=retries
    )
    return make_oracle(spec)


@contextmanager
def http_vendor(*args: str) -> Iterator[str]:
    """The hostile vendor as a real HTTP server on 127.0.0.1; yields its base URL."""
    proc = subprocess.Popen(
        [sys.executable, str(VENDOR), "--http", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        line = proc.stdout.readline() if ready else ""
        if not line.startswith("listening on "):
            pytest.fail(f"hostile HTTP vendor did not start: {line!r}")
        yield line.split()[-1]
    finally:
        proc.kill()
        proc.wait()
