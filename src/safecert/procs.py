"""Processes we start, we reap: vendor programs under a supervisor, parent-death signals.

A vendor program (``exec:`` policies) may fork children, put them in other process groups or
sessions, daemonise them, scrub their environment, and signal any process of its user — its
supervisor and safecert included; a plain ``kill`` of the vendor leaves its children running. On
Linux every vendor therefore runs under :mod:`safecert.supervisor`, a tiny program (one bare
interpreter start-up, ``python -I -S``) with a parent-death signal, which puts the vendor in a PID
namespace of its own where the kernel allows one (*contained*: root, or unprivileged user
namespaces — see :attr:`VendorProcess.contained`). Closing a :class:`VendorProcess` (or ``kill -9``
of the process that started it) makes the supervisor end the namespace (or, uncontained, SIGKILL,
reap and rescan its subtree) until it is empty; only then does it exit.

Guarantee, contained: once :meth:`VendorProcess.kill` has returned, or shortly after the starting
process died, no process the vendor started is alive — it cannot signal or stop its supervisor or
safecert (they are outside its namespace), and the kernel ends every process of the namespace with
its pid 1. Uncontained (the kernel refused both namespaces; a warning is logged once), the vendor
can SIGKILL or SIGSTOP its supervisor: :meth:`VendorProcess.kill` resumes a stopped one and SIGKILLs
one that does not answer, and inside :func:`reaping` this process is a subreaper that kills what it
adopts from a dead supervisor's subtree (:mod:`safecert.orphans`) — but a ``kill -9`` of this process
after such an attack leaves the orphans to ``init``. Either way, not covered: a process of another
user (set-uid) and one started for the vendor by a process outside its subtree (a system service).
Elsewhere (no ``prctl``), the vendor runs directly in a session of its own and ``kill`` reaches its
process group only.

Pool workers use :func:`die_with_parent` and :func:`exit_with` so that they, in turn, end with the
run; :func:`reaping` scopes a run.

Killing is best effort about processes that vanish meanwhile and never raises for them; starting
raises ``OSError`` as :class:`subprocess.Popen` does.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from safecert import orphans

SUPERVISOR = Path(__file__).with_name("supervisor.py")
#: supervise vendors (Linux: needs ``prctl``); elsewhere they run directly in their own session
SUPERVISED = sys.platform.startswith("linux")
START_WAIT_S = 30.0  # the supervisor's report: one interpreter start-up, however loaded the machine
KILL_WAIT_S = 10.0  # the supervisor's clean-up (it gives up after supervisor.GIVE_UP_S itself)
#: a PID namespace per vendor where the kernel allows it; ``SAFECERT_PID_NAMESPACE=0`` turns it off
#: (vendors then see the machine's pids, and the uncontained guarantee applies)
CONTAIN = os.environ.get("SAFECERT_PID_NAMESPACE", "1") != "0"
_PR_SET_PDEATHSIG = 1
_log = logging.getLogger(__name__)


def readable(fd: int, timeout_s: float | None) -> bool:
    """Whether ``fd`` is readable (or at its end, or in error) within ``timeout_s`` seconds
    (``None``: wait until it is). By poll(2), which takes a descriptor of any number: select(2)
    refuses 1024 and above, which a process holding many files reaches where the soft limit on
    open files is higher (often)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(None if timeout_s is None else poll_ms(timeout_s)))


def poll_ms(timeout_s: float) -> int:
    """A timeout in seconds as poll(2)'s whole milliseconds, rounded up (never a busy wait)."""
    return max(0, math.ceil(timeout_s * 1000))


def die_with_parent() -> bool:
    """Ask the kernel to SIGKILL this process when its parent (thread) dies (worker processes)."""
    return orphans.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


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
            readable(fd, None)
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


def shutdown_pool(pool: Any, *, abort: bool, wait_s: float) -> None:
    """Shut a :class:`concurrent.futures.ProcessPoolExecutor` down. ``abort``: do not wait for
    the work in progress — every worker gets ``SIGTERM`` (its own handlers close what it holds)
    and is killed when it has not exited after ``wait_s``; then the pool is shut down. The
    workers are read from the pool's private ``_processes``; absent, the plain shutdown still
    ends them once their work finishes."""
    if abort:
        workers = list((getattr(pool, "_processes", None) or {}).values())
        for proc in workers:
            proc.terminate()
        for proc in workers:
            proc.join(wait_s)
            if proc.is_alive():
                proc.kill()
                proc.join()
    pool.shutdown(wait=True, cancel_futures=True)


@contextlib.contextmanager
def reaping() -> Iterator[None]:
    """Scope of a run that starts vendors: ``SIGTERM`` unwinds like Ctrl-C (so clean-up runs), and
    on any exit — normal, error, Ctrl-C, ``SIGTERM`` — every vendor this process started and did
    not close yet is killed with its subtree (:func:`kill_all`).

    Inside the scope this process is a child subreaper (:func:`safecert.orphans.adopting`):
    orphans of an uncontained vendor whose supervisor was killed — from this process or from its
    pool workers — are re-parented here instead of to ``init`` and killed when a vendor is closed
    and when the scope ends."""
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        with orphans.adopting():
            try:
                yield
            finally:
                kill_all()
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


_LIVE: set[VendorProcess] = set()
_WARNED: list[bool] = []
_MAPS_REFUSED: list[bool] = []  # the kernel gives user namespaces but refuses their id maps
_LIVE_LOCK = threading.Lock()
# a forked child must not close its parent's vendors
os.register_at_fork(after_in_child=_LIVE.clear)


def kill_all() -> int:
    """Kill every vendor this process started and did not close yet; the number killed."""
    with _LIVE_LOCK:
        live = list(_LIVE)
    for vendor in live:
        vendor.kill()
    return len(live)


class VendorProcess:
    """A vendor program with pipes on its stdin, stdout and stderr, started without a shell.

    Supervised (Linux, the default): ``pid`` is the supervisor's; its exit status is the
    vendor's (exit code, or the signal that killed it), so ``poll``/``wait``/``returncode`` read as
    they would for the vendor itself; end of file on ``stdout`` comes when the vendor and every
    process holding its pipe are gone. ``kill`` asks the supervisor to clear the subtree and waits
    for it (at most :data:`KILL_WAIT_S`; past that the supervisor's session is SIGKILLed).
    Unsupervised: the vendor itself, in a session of its own; ``kill`` SIGKILLs that session's
    process group. ``contain`` (default :data:`CONTAIN`) asks for a PID namespace; ``contained``
    says whether the kernel gave one (``vendor_pid`` is then still the pid as this process's
    ``/proc`` names it).

    Raises ``OSError`` as :class:`subprocess.Popen` would when the program cannot be started.
    With ``wait=False`` (supervised) the constructor returns once the supervisor is started, without
    waiting for its report (one bare interpreter start-up: tens of milliseconds a caller can spend
    on its own work): :meth:`started` waits for it and raises that ``OSError`` then; ``vendor_pid``,
    ``contained`` and :meth:`kill` wait for it first, and the pipes may be written meanwhile (the
    vendor reads them once it runs). Until then, a supervisor that the kernel refused a user
    namespace's id maps is started again uncontained, with new pipes (``stdin``, ``stdout``,
    ``stderr`` are the current ones after :meth:`started`).
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        cwd: str | None = None,
        supervised: bool = SUPERVISED,
        contain: bool | None = None,
        wait: bool = True,
    ) -> None:
        self.argv = tuple(argv)
        self.supervised = supervised
        self._contained = False
        self._contain = CONTAIN if contain is None else contain
        self._cwd = cwd
        self._report: int | None = None  # the supervisor's report pipe, until read
        if not supervised:
            self._popen = self._popen_of(self.argv, (), cwd)
            self._vendor_pid = self._popen.pid
        else:
            self._report = self._start_supervisor(cwd, self._contain and not _MAPS_REFUSED)
            if wait:
                self.started()
        with _LIVE_LOCK:
            _LIVE.add(self)
        self._take_pipes()

    def _take_pipes(self) -> None:
        self.stdin: IO[bytes] = self._popen.stdin  # type: ignore[assignment]
        self.stdout: IO[bytes] = self._popen.stdout  # type: ignore[assignment]
        self.stderr: IO[bytes] = self._popen.stderr  # type: ignore[assignment]

    def started(self) -> None:
        """Wait for the supervisor's report (a no-op once read): the vendor runs, or ``OSError``
        says why it could not be started (the supervisor is reaped; this object is then closed)."""
        fd, self._report = self._report, None
        if fd is None:
            return
        try:
            try:
                vendor_pid = self._read_report(fd)
            finally:
                os.close(fd)
            if vendor_pid is None:  # once per process: later vendors go uncontained at once
                _MAPS_REFUSED.append(True)
                fd = self._start_supervisor(self._cwd, False)
                try:
                    vendor_pid = self._read_report(fd)
                finally:
                    os.close(fd)
                assert vendor_pid is not None  # no user namespace asked for: none refused
                self._take_pipes()
        except BaseException:
            with _LIVE_LOCK:
                _LIVE.discard(self)
            raise
        self._vendor_pid = vendor_pid

    @property
    def vendor_pid(self) -> int:
        """The vendor's own pid (:meth:`started` first)."""
        self.started()
        return self._vendor_pid

    @property
    def contained(self) -> bool:
        """The vendor runs in a PID namespace of its own (see the module's guarantee;
        :meth:`started` first)."""
        self.started()
        return self._contained

    @staticmethod
    def _popen_of(
        argv: Sequence[str], pass_fds: tuple[int, ...], cwd: str | None = None
    ) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            bufsize=0,
            start_new_session=True,
            pass_fds=pass_fds,
        )

    def _start_supervisor(self, cwd: str | None, contain: bool) -> int:
        """Start the supervisor; the read end of its report pipe (:meth:`_read_report`)."""
        read_end, write_end = os.pipe()
        try:
            command = (sys.executable, "-I", "-S", str(SUPERVISOR), str(os.getpid()))
            self._popen = self._popen_of(
                (*command, str(write_end), str(int(contain)), *self.argv), (write_end,), cwd
            )
            orphans.started_on_purpose(self._popen.pid)
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)
        return read_end

    def _read_report(self, fd: int) -> int | None:
        """The supervisor's one line: the vendor's pid; None if the kernel gave a user namespace
        but refused its id maps (nothing was started); the start error raised as ``OSError``."""
        line = b""
        deadline = time.monotonic() + START_WAIT_S
        while not line.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not readable(fd, remaining):
                self._force_kill()
                orphans.forget(self._popen.pid)
                raise OSError(f"the vendor supervisor did not start within {START_WAIT_S:g}s")
            data = os.read(fd, 256)
            if not data:
                code = self._end_failed_start()
                raise OSError(f"the vendor supervisor exited with code {code} before starting it")
            line += data
        word, *rest = line.split()
        if word == b"refused":
            self._end_failed_start()
            return None
        if word == b"error":
            self._end_failed_start()
            errno = int(rest[0])
            raise OSError(errno, os.strerror(errno), self.argv[0])
        if rest[1] != b"1":
            _log.warning(
                "the kernel refused PR_SET_CHILD_SUBREAPER: vendor children may outlive it"
            )
        self._contained = rest[2] == b"1"
        if not self._contained and self._contain and not _WARNED:
            _WARNED.append(True)
            _log.warning(
                "the kernel refused a PID namespace for vendors: a vendor that kills or stops its "
                "supervisor is cleaned up only while this process runs"
            )
        return int(rest[0])

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        return self._popen.returncode

    def poll(self) -> int | None:
        return self._popen.poll()

    def wait(self, timeout: float | None = None) -> int:
        """``Popen.wait``; with a ``timeout``, woken by the exit itself (:meth:`_wait_exit`)."""
        return self._popen.wait() if timeout is None else self._wait_exit(timeout)

    def kill(self) -> None:
        """Kill the vendor and everything it started, reap them, and close nothing else (the
        caller owns the pipes). Safe to call twice."""
        with contextlib.suppress(OSError):  # a supervisor mid-start is killed once set up
            self.started()
        if self._popen.poll() is None:
            if self.supervised:
                self._ask_to_end()
                try:
                    self._wait_exit(KILL_WAIT_S)
                except subprocess.TimeoutExpired:
                    self._force_kill()
            else:
                self._force_kill()
        with _LIVE_LOCK:
            _LIVE.discard(self)
        if self.supervised and not self._contained:
            # a supervisor the vendor killed or stopped left its subtree to us (in reaping())
            orphans.sweep_adopted()
        orphans.forget(self._popen.pid)

    def end(self) -> None:
        """Ask the vendor to end and return at once (:meth:`kill` without its wait): the
        supervisor clears the subtree while the caller goes on, and :meth:`kill` then waits only
        for what is left of that, and reaps. Unsupervised, its process group is SIGKILLed. Safe
        to call twice, and after the vendor exited."""
        with contextlib.suppress(OSError):  # a supervisor mid-start is asked once set up
            self.started()
        if self._popen.poll() is not None:
            return
        if self.supervised:
            self._ask_to_end()
        else:
            with contextlib.suppress(OSError):  # not reaped yet: the pid names its group
                os.killpg(self._popen.pid, signal.SIGKILL)

    def _ask_to_end(self) -> None:
        with contextlib.suppress(OSError):
            self._popen.send_signal(signal.SIGTERM)  # the supervisor's close request
            self._popen.send_signal(signal.SIGCONT)  # an uncontained vendor stopped it

    def _wait_exit(self, timeout: float) -> int:
        """``Popen.wait(timeout)``, woken by the supervisor's exit itself (a pidfd, Linux 5.3 and
        later) instead of looking at 1, 3, 7, 15 … ms as ``Popen.wait`` does: a supervisor that
        has cleared its subtree in 3 ms is reaped then, not 4 ms later. ``TimeoutExpired`` after
        ``timeout`` seconds, as ``Popen.wait``; without pidfds it is ``Popen.wait``. A child
        already reaped answers its exit code at once: its pid may name another process by now."""
        code = self._popen.poll()
        if code is not None:
            return code
        try:
            pidfd = os.pidfd_open(self._popen.pid)
        except (AttributeError, OSError):  # no pidfds here, or already reaped
            return self._popen.wait(timeout)
        try:
            if not readable(pidfd, timeout):
                raise subprocess.TimeoutExpired(self._popen.args, timeout)
        finally:
            os.close(pidfd)
        return self._popen.wait()  # it has exited: reaped at once

    def _end_failed_start(self) -> int:
        """Reap a supervisor that reported a failed start; its exit code."""
        code = self._popen.wait()
        self._close_pipes()
        orphans.forget(self._popen.pid)
        return code

    def _force_kill(self) -> None:
        # not reaped yet, so the pid still names this session's group
        with contextlib.suppress(OSError):
            os.killpg(self._popen.pid, signal.SIGKILL)
        self._popen.wait()

    def _close_pipes(self) -> None:
        for pipe in (self._popen.stdin, self._popen.stdout, self._popen.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
