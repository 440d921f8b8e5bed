"""Orphans a run adopts: this process as a child subreaper, and the sweep of what it adopted.

A vendor that is not in a PID namespace of its own (:attr:`safecert.procs.VendorProcess.contained`)
can SIGKILL its supervisor — the process that kept its subtree together. Its orphans then go to the
nearest *subreaper* among their ancestors, else to ``init``. Inside :func:`adopting` this process is
one, so they come here — from its own vendors and from those of its pool workers (which are not
subreapers) — and :func:`sweep_adopted` kills them with everything they started.

Which children are adopted orphans: those this process did not start on purpose (vendor
supervisors registered with :func:`started_on_purpose`, ``multiprocessing``'s forkserver, resource
tracker and processes) and that started after the first :func:`adopting` scope began (a vendor's
orphan is younger than the run). Assumption: nothing else in this process starts children inside
the scope and leaves them unregistered — in safecert's ``certify`` nothing does.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator

SWEEP_GIVE_UP_S = 5.0  # rounds of :func:`sweep_adopted` (a set-uid orphan cannot be killed)
_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_log = logging.getLogger(__name__)


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()


def prctl(option: int, arg: int) -> bool:
    """``prctl(option, arg)``; False where it failed or there is none (not Linux)."""
    return _PRCTL is not None and int(_PRCTL(option, arg, 0, 0, 0)) == 0


class _Adoption:
    """Since when (clock ticks since boot) an orphan can be one of a vendor's; the supervisors
    this process started (children on purpose)."""

    scopes = 0
    since_ticks: int | None = None
    warned = False
    supervisors: set[int] = set()


_ADOPTION = _Adoption()
os.register_at_fork(after_in_child=_ADOPTION.supervisors.clear)


def started_on_purpose(pid: int) -> None:
    """Register a child this process started (a vendor supervisor): never swept."""
    _ADOPTION.supervisors.add(pid)


def forget(pid: int) -> None:
    """The child ``pid`` was reaped: its pid may be reused."""
    _ADOPTION.supervisors.discard(pid)


@contextlib.contextmanager
def adopting() -> Iterator[None]:
    """Make this process a child subreaper (Linux) for the block; at its end, sweep what it
    adopted (:func:`sweep_adopted`) and restore the previous setting. Nested scopes share the
    first one's start."""
    was_subreaper = _is_subreaper()
    _ADOPTION.scopes += 1
    if _ADOPTION.since_ticks is None:
        _ADOPTION.since_ticks = _boot_ticks()
    became = was_subreaper or prctl(_PR_SET_CHILD_SUBREAPER, 1)
    try:
        yield
    finally:
        if became:
            sweep_adopted()
        _ADOPTION.scopes -= 1
        if not _ADOPTION.scopes:
            _ADOPTION.since_ticks = None
        if became and not was_subreaper:
            prctl(_PR_SET_CHILD_SUBREAPER, 0)


def _boot_ticks() -> int:
    """Now, in the unit and clock of ``starttime`` in ``/proc/PID/stat`` (ticks since boot)."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * _TICKS)


def _is_subreaper() -> bool:
    if _PRCTL is None:
        return False
    flag = ctypes.c_int(0)
    return int(_PRCTL(_PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0)) == 0 and bool(
        flag.value
    )


def _starttime(pid: int) -> int | None:
    """When a process started, in ticks since boot (``/proc/PID/stat``); None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return int(fh.read().rpartition(b")")[2].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _children_of(pid: int) -> set[int]:
    """Live and zombie children of every thread of ``pid`` (an orphan is adopted by any thread)."""
    found: set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                found.update(int(p) for p in fh.read().split())
        except OSError:
            continue
    return found


def _on_purpose() -> set[int]:
    """Children this process started deliberately: vendor supervisors, multiprocessing's."""
    known = set(_ADOPTION.supervisors)
    mp = sys.modules.get("multiprocessing")
    if mp is not None:
        known.update(p.pid for p in mp.active_children() if p.pid is not None)
        server = getattr(sys.modules.get("multiprocessing.forkserver"), "_forkserver", None)
        tracker = getattr(
            sys.modules.get("multiprocessing.resource_tracker"), "_resource_tracker", None
        )
        known.update(
            pid
            for pid in (getattr(server, "_forkserver_pid", None), getattr(tracker, "_pid", None))
            if pid
        )
    return known


def adopted() -> list[int]:
    """Children of this process that are orphans it adopted as a subreaper: not started here on
    purpose (:func:`_on_purpose`) and started after the first :func:`adopting` scope began (an
    orphan of a vendor is younger than the run). Empty outside :func:`adopting`, and in a process
    that is not a subreaper now (a fork of one inherits the scope but not the flag: its children
    are all its own)."""
    since = _ADOPTION.since_ticks
    if since is None or not sys.platform.startswith("linux") or not _is_subreaper():
        return []
    me, known = os.getpid(), _on_purpose()
    found = []
    for pid in sorted(_children_of(me) - known):
        started = _starttime(pid)
        # in whole ticks: a process of the scope's first tick (before any vendor) is not one
        if started is not None and started > since:
            found.append(pid)
    return found


def sweep_adopted() -> int:
    """SIGKILL every adopted orphan (:func:`adopted`) and all its descendants, reap them, and look
    again until none is left (their own orphans are adopted here in turn) or
    :data:`SWEEP_GIVE_UP_S` has passed; the number of processes cleared (killed, or reaped
    zombies).

    Stopped processes die too (SIGKILL needs no cooperation). Descendants are killed before the
    orphan's death could hand them on, and any that slip through are re-parented here and found by
    the next round."""
    killed: set[int] = set()
    deadline = time.monotonic() + SWEEP_GIVE_UP_S
    while time.monotonic() < deadline:
        roots = adopted()  # zombies included: they are reaped below
        if not roots:
            break
        tree, todo = [], list(roots)
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo.extend(_children_of(pid))
        for pid in tree:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        killed.update(tree)
        for pid in roots:
            with contextlib.suppress(OSError):
                os.waitpid(pid, os.WNOHANG)
        time.sleep(0.005)  # the kills take effect; the next round reaps and looks again
    if killed:  # once as a warning: a vendor that attacks its supervisor does it at every start
        level = logging.DEBUG if _ADOPTION.warned else logging.WARNING
        _ADOPTION.warned = True
        _log.log(level, "cleared %d process(es) a vendor left behind its supervisor", len(killed))
    return len(killed)
