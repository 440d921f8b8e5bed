"""Processes we start, we reap: vendor sessions, a child subreaper, parent-death signals.

A vendor program (``exec:`` policies) may fork children, put them in other process groups, or
``setsid`` them into a session of their own; a plain ``kill`` of the vendor leaves them running. Three
mechanisms together guarantee that none outlive the run (Linux; elsewhere only the first applies):

* **marking**: every vendor starts in a session of its own and with the environment variable
  :data:`MARK_VAR` set to a token unique to that vendor; children inherit it unless they scrub
  their environment. :func:`kill_tree` kills the vendor, its process group and session, every
  descendant found through ``/proc``, and every process of this user carrying the token.
* **subreaper**: :func:`become_subreaper` (``prctl(PR_SET_CHILD_SUBREAPER)``) makes orphans — a
  daemon whose intermediate parent already exited — children of this process instead of ``init``,
  so they stay descendants, are found by :func:`sweep_vendors` and are reaped here.
* **parent-death signal**: :func:`vendor_preexec` sets ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` in the
  vendor, so a vendor dies with the thread that started it, even when safecert is killed with
  ``kill -9`` (the kernel clears this setting across ``fork``; the vendor's own children are covered
  by the two mechanisms above only while safecert lives).

All functions are best effort about processes that vanish meanwhile and never raise for them.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator

MARK_VAR = "SAFECERT_VENDOR_TOKEN"
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_REAP_WAIT_S = 2.0


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


# resolved once, in the parent: a forked child must not run the dynamic loader before exec
_PRCTL = _load_prctl()


def _prctl(option: int, arg: int) -> bool:
    return _PRCTL is not None and int(_PRCTL(option, arg, 0, 0, 0)) == 0


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants; True where the kernel agreed."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent() -> bool:
    """Ask the kernel to SIGKILL this process when its parent (thread) dies (worker processes)."""
    return _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def exit_with(pid: int, cleanup: Callable[[], None]) -> threading.Thread:
    """Run ``cleanup`` and leave (``os._exit``) as soon as process ``pid`` has ended.

    For pool workers, whose parent is multiprocessing's forkserver rather than the run: the
    forkserver outlives a run killed with ``kill -9`` (every worker holds its liveness pipe open),
    so the parent-death signal alone would never fire. A daemon thread waits on a pidfd (Linux
    5.3+), else polls once a second."""

    def watch() -> None:
        try:
            fd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):
            fd = None
        if fd is not None:
            select.select([fd], [], [])
        else:
            while True:
                time.sleep(1.0)
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                except PermissionError:
                    continue
        try:
            cleanup()
        finally:
            os._exit(1)

    thread = threading.Thread(target=watch, name="safecert-exit-with", daemon=True)
    thread.start()
    return thread


@contextlib.contextmanager
def reaping() -> Iterator[None]:
    """Scope of a run that starts vendors: this process becomes a subreaper, ``SIGTERM`` unwinds
    like Ctrl-C (so cleanup runs), and on any exit — normal, error, Ctrl-C, ``SIGTERM`` — every
    marked vendor process still below this process is killed and reaped (:func:`sweep_vendors`)."""
    adopted = become_subreaper()
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        sweep_vendors()
        if adopted:  # a library caller (tests, notebooks) gets its process back as it was
            _prctl(_PR_SET_CHILD_SUBREAPER, 0)


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def new_token() -> str:
    """A fresh vendor token for :data:`MARK_VAR`."""
    return f"{os.getpid()}-{uuid.uuid4().hex}"


def vendor_env(token: str) -> dict[str, str]:
    """This process's environment plus the vendor mark."""
    return {**os.environ, MARK_VAR: token}


def vendor_preexec() -> Callable[[], None]:
    """A ``preexec_fn`` that arms the parent-death signal and exits if the parent already died.

    Runs in the child between ``fork`` and ``exec``: only async-signal-safe work (one ``prctl``,
    one ``getppid``)."""
    parent = os.getpid()

    def arm() -> None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os._exit(1)

    return arm


def _proc_pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def _stat(pid: int) -> tuple[int, int, int] | None:
    """(ppid, pgid, sid) of a live, non-zombie process, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[1]), int(fields[2]), int(fields[3])


def _has_mark(pid: int, token: str | None) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            env = fh.read()
    except OSError:
        return False
    prefix = f"{MARK_VAR}=".encode()
    for item in env.split(b"\0"):
        if item.startswith(prefix):
            return token is None or item[len(prefix) :] == token.encode()
    return False


def descendants(root: int) -> set[int]:
    """Live descendants of ``root`` found through ``/proc`` (``root`` excluded)."""
    children: dict[int, list[int]] = {}
    for pid in _proc_pids():
        st = _stat(pid)
        if st is not None:
            children.setdefault(st[0], []).append(pid)
    out: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def vendor_processes(root: int | None, token: str | None) -> set[int]:
    """Processes belonging to a vendor: ``root``'s descendants, its group and session, and every
    process marked with ``token`` (``token=None``: any vendor mark, only among our descendants)."""
    me = os.getpid()
    if token is None:
        return {p for p in descendants(me) if _has_mark(p, None)}
    found = descendants(root) if root is not None else set()
    for pid in _proc_pids():
        if pid == me or pid in found:
            continue
        st = _stat(pid)
        if st is None:
            continue
        if root is not None and root in (st[1], st[2]):
            found.add(pid)
        elif _has_mark(pid, token):
            found.add(pid)
    if root is not None and _stat(root) is not None:
        found.add(root)
    return found


def _kill(pids: Iterable[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _reap(pids: set[int], wait_s: float) -> None:
    """Reap those of ``pids`` that are (or become, as orphans) our children; wait for the rest to
    disappear from ``/proc`` for at most ``wait_s``."""
    deadline = time.monotonic() + wait_s
    left = set(pids)
    while left:
        for pid in list(left):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # not our child: gone once /proc says so
                done = pid if _stat(pid) is None else 0
            if done:
                left.discard(pid)
        if not left or time.monotonic() >= deadline:
            return
        time.sleep(0.01)


def kill_tree(root: int | None, token: str | None, *, wait_s: float = _REAP_WAIT_S) -> int:
    """SIGKILL a vendor and everything it started (see the module docstring); reap what is ours.

    Repeats the scan until nothing is found (a dying parent's children may be re-parented while
    we look). Returns the number of processes killed."""
    killed: set[int] = set()
    for _ in range(5):
        found = vendor_processes(root, token) - killed
        if root is not None:
            with contextlib.suppress(OSError):
                os.killpg(root, signal.SIGKILL)
        if not found:
            break
        _kill(found)
        killed |= found
    _reap(killed, wait_s)
    return len(killed)


def sweep_vendors(*, wait_s: float = _REAP_WAIT_S) -> int:
    """Kill and reap every marked vendor process still below this process (at exit of a run)."""
    killed: set[int] = set()
    for _ in range(5):
        found = vendor_processes(None, None) - killed
        if not found:
            break
        _kill(found)
        killed |= found
    _reap(killed, wait_s)
    return len(killed)
