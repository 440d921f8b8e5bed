"""The trust boundary: vendor code runs in supervised child processes that only exchange data.

safecert judges policies whose authors may want them to pass, so code it did not write — a
``python:`` policy module, a Stable-Baselines3 zip (pickle runs code), a TorchScript module, a
``python:`` environment factory — never runs in the process that counts episodes, judges, writes or
verifies certificates (``docs/threat-model.md``). It runs in a child started by :class:`Channel`
under :mod:`safecert.supervisor` (its whole subtree is reaped, ``kill -9`` of safecert included) and
the two sides exchange newline-delimited JSON only: the parent never unpickles or imports anything
a child produced.

* :class:`Channel` — one long-lived child answering request lines in order (a round trip, or
  requests posted ahead and their replies collected later), with a *deadline* per call (not a
  per-read timeout), a start-up grace for the first call, a cap on the reply's size; a child that
  dies, hangs or floods is killed with its subtree and restarted on the next call.
* :func:`worker_command` — the command line of safecert's own workers (``python -I -B -m ...``):
  isolated mode (no ``PYTHON*`` variables, no user site, no current folder on ``sys.path``) and no
  bytecode written, so a run adds no file to the folder whose code it hashed.
* :func:`loadable_code` — every file under a folder that ``import`` can load once that folder is on
  ``sys.path`` (sources, bytecode in ``__pycache__``, extension modules, in packages and namespace
  packages): certificates hash them all, and ``safecert verify`` refuses a folder that holds one more.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import fcntl
import hashlib
import importlib.machinery
import itertools
import os
import re
import select
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from safecert import procs
from safecert.errors import ConfigError

_STDERR_TAIL = 2000
_ERROR_LINE = re.compile(
    r"error|exception|cannot|can't|not found|no such|denied|fatal|panic|abort", re.IGNORECASE
)


def stderr_summary(text: str) -> list[str]:
    """The lines of a crashed child's stderr that say why: the first two that read like an error
    (Node.js and Java print the error first and a stack trace after it; Python prints it last)
    and the last line, in their order, each at most 300 characters."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    keep = [i for i, line in enumerate(lines) if _ERROR_LINE.search(line)][:2]
    keep = sorted({*keep, len(lines) - 1} - {-1})
    return [lines[i][:300] for i in keep]


_CHUNK = 1 << 16
#: the longest reply line (exec) or body (HTTP) accepted; a batch of 4096 rows is a few MB
MAX_REPLY_BYTES = 64 << 20
STARTUP_GRACE_S = 30.0  # extra time for the first call after a (re)start: imports, model loading
#: a folder whose importable files are more than this is refused (hash them all, or move the code)
MAX_CODE_FILES = 5000
_LOADABLE_SUFFIXES = tuple(sorted(set(importlib.machinery.all_suffixes()), key=len, reverse=True))


class ChannelFailure(Exception):
    """One round trip failed; ``reason`` is one line (the child is already killed and reaped)."""

    def __init__(self, reason: str) -> None:
        self.reason = " ".join(str(reason).split())
        super().__init__(self.reason)


class Channel:
    """A long-running child process, started lazily without a shell in ``cwd``, that answers
    each request line with one reply line.

    Guarantees: a call is a *deadline*: it fails ``timeout_s`` after it started however the child
    trickles its reply (non-blocking pipes multiplexed with ``select``; writes, reads and the
    child's stderr are all serviced within the deadline). The only extension is start-up: on the
    first call after a (re)start, until the child writes its first byte of stdout, it may also spend
    :data:`STARTUP_GRACE_S` (interpreter, imports, model loading); from its first byte on, the reply
    must be complete within ``timeout_s``. A call that times out kills the child and everything it
    started (a late reply would put requests and replies out of step); a child that exits or
    closes its pipes fails the call with its exit code and the tail of its stderr. Either way the
    next call starts a fresh process (``restarts`` counts them). ``close`` kills and reaps whatever
    the child left behind. With ``handshake`` (safecert's own workers) the child writes one ready
    line once it has loaded what it runs; the start-up grace ends there, so the first call gets
    ``timeout_s`` like every other. ``what`` names the child in messages (``vendor``, ``policy worker``).
    :meth:`post` and :meth:`collect` split a round trip, so that several requests are in flight.
    """

    def __init__(
        self,
        argv: tuple[str, ...],
        *,
        cwd: str,
        timeout_s: float,
        what: str = "vendor",
        handshake: bool = False,
    ) -> None:
        self.argv = argv
        self.handshake = handshake
        self.cwd = cwd
        self.timeout_s = timeout_s
        self.what = what
        self.restarts = 0
        self._proc: procs.VendorProcess | None = None
        self._ending: list[procs.VendorProcess] = []  # asked to end (:meth:`end`), not reaped
        self._buf = b""
        self._stderr = b""
        self._started = 0
        self._unsettled = False  # started by :meth:`start`, the supervisor not heard from yet
        self._awaiting_ready = False  # started by :meth:`start`, its ready line not yet read
        self._grace = 0.0  # the start-up grace of the next reply (a child without a ready line)
        #: requests posted, not yet answered, oldest first: (ticket, posted at, deadline in s,
        #: the request line)
        self._in_flight: collections.deque[tuple[int, float, float, bytes]] = collections.deque()
        self._replies: dict[int, bytes | ChannelFailure] = {}  # read, not yet collected
        #: the child's poll(2) set (select(2) refuses descriptors from 1024 on): its output and
        #: error output while open, its input while requests wait to be written (``_writing``)
        self._polled: procs.VendorProcess | None = None
        self._poller = select.poll()
        self._writing = False
        self._out = bytearray()  # request bytes the pipe has not taken yet
        self._next_ticket = 0
        self._answered = 0.0  # when the last reply was read
        self.ready_line = b""  # the child's last handshake line (``handshake``)

    @property
    def pid(self) -> int | None:
        """The child's own pid (not the supervisor's), or None when it is not running (after
        :meth:`start`, once its start has completed: a failed one leaves none, and the next
        call starts afresh and says why)."""
        if self._proc is not None and self._unsettled:
            with contextlib.suppress(ChannelFailure):
                self._settle(self._proc)
        return None if self._proc is None else self._proc.vendor_pid

    # -- process management -------------------------------------------------------------------
    def _start(self, *, wait: bool = True) -> procs.VendorProcess:
        """Start the child; without ``wait``, :meth:`_settle` completes the start before the
        first request is written."""
        try:
            proc = procs.VendorProcess(self.argv, cwd=self.cwd, wait=wait)
        except OSError as exc:
            raise ChannelFailure(f"cannot start {self.argv[0]}: {exc}") from None
        if self.handshake:
            _LIVE_WORKERS.add(self)
        if self._started:
            self.restarts += 1
        self._started += 1
        self._proc, self._buf, self._stderr = proc, b"", b""
        self._out.clear()
        self._unsettled = True
        if wait:
            self._settle(proc)
        return proc

    def _settle(self, proc: procs.VendorProcess) -> None:
        """The start completed: the supervisor's report read (a failed start is a
        :class:`ChannelFailure`, the child reaped), the pipes non-blocking, the child pinned
        where the caller's thread is colocated (:func:`colocated`)."""
        if not self._unsettled:
            return
        try:
            proc.started()
        except OSError as exc:
            self._kill()
            raise ChannelFailure(f"cannot start {self.argv[0]}: {exc}") from None
        self._unsettled = False
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            os.set_blocking(pipe.fileno(), False)
        if self.handshake:
            cpu = _COLOCATION.cpu_of(self)
            if cpu is not None:
                _pin(proc.vendor_pid, {cpu})
        elif _COLOCATION.mask is not None:  # a vendor started from a pinned thread gets every CPU
            _pin(proc.vendor_pid, _COLOCATION.mask)

    def _kill(self) -> None:
        """Kill and reap the child and every process it started (``setsid`` ones included), and
        those :meth:`end` asked to end."""
        proc, self._proc = self._proc, None
        self._unsettled = False
        ending, self._ending = self._ending, []
        for child in (*ending, *(() if proc is None else (proc,))):
            child.kill()
            _close(child.stdin, child.stdout, child.stderr)

    def _crashed(self, proc: procs.VendorProcess, what: str) -> ChannelFailure:
        try:
            code: int | None = proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            code = None
        self._drain_stderr(proc)
        tail = stderr_summary(self._stderr.decode(errors="replace"))
        self._kill()
        detail = f"; stderr: {' | '.join(tail)}" if tail else ""
        return ChannelFailure(
            f"{self.what} {what} (exit code {code}){detail}; restarted on the next call"
        )

    def _drain_stderr(self, proc: procs.VendorProcess) -> bool:
        try:
            data = proc.stderr.read(_CHUNK)
        except (BlockingIOError, ValueError):
            return True
        if data is None:  # nothing to read right now
            return True
        if data:
            self._stderr = (self._stderr + data)[-_STDERR_TAIL:]
        return bool(data)

    def start(self) -> None:
        """Start a ``handshake`` child now without waiting for it — not even for its
        supervisor's report (:class:`safecert.procs.VendorProcess` ``wait=False``): its start-up
        (interpreter, imports; model loading too, unless the child loads on its first request,
        as a ``gated`` policy worker does) overlaps the caller's own work, and the first round
        trip completes the start (a start that failed fails that call) and waits for its ready
        line under the start-up grace. A no-op while it runs."""
        assert self.handshake, "a child without a ready line gets its grace at its first call"
        if self._in_flight or (self._proc is not None and self._proc.poll() is None):
            return
        self._kill()
        self._start(wait=False)
        self._awaiting_ready = self.handshake

    # -- one round trip, or several in flight ---------------------------------------------
    def round_trip(self, payload: bytes, timeout_s: float | None = None) -> bytes:
        """Send one request line (``payload`` without its newline); return the reply line.

        ``timeout_s``: this call's deadline when it is not the channel's (a request that carries
        several policy calls gets the sum of theirs)."""
        return self.collect(self.post(payload, timeout_s))

    def post(self, payload: bytes, timeout_s: float | None = None) -> int:
        """Send one request line now and return its ticket; :meth:`collect` reads its reply.

        Requests are answered in order, so several may be in flight: a caller may post the next
        request before it has read the last reply (the child works while the caller does). Each
        keeps the guarantees of :meth:`round_trip`: its deadline (``timeout_s``, else the
        channel's) runs from when the child can have started on it — the later of its posting
        and the reading of the reply before it — so a request queued behind another is not
        charged for the other's time. A failure (a crash, a timeout, a flood) kills the child
        and fails that request; the requests behind it, which the child never answered, are
        sent again to a fresh child, as if posted then — each request meets the child it would
        have met had the caller waited for every reply before posting the next, so posting ahead
        changes no reply."""
        ticket = self._next_ticket
        self._next_ticket += 1
        self._send(ticket, payload, self.timeout_s if timeout_s is None else timeout_s)
        return ticket

    def _send(self, ticket: int, payload: bytes, timeout: float) -> None:
        if not self._in_flight:
            proc = self._proc
            if proc is not None and self._unsettled:
                try:
                    self._settle(proc)
                except ChannelFailure as exc:
                    self._replies[ticket] = exc
                    return
                proc = self._proc
            if proc is None or proc.poll() is not None:
                # Never started, or exited after its last reply (nothing was lost): start afresh.
                self._kill()
                try:
                    self._start()
                except ChannelFailure as exc:
                    self._replies[ticket] = exc
                    return
                self._awaiting_ready = self.handshake
                self._grace = STARTUP_GRACE_S
        self._in_flight.append((ticket, time.monotonic(), timeout, payload))
        self._out += payload + b"\n"
        proc = self._proc
        assert proc is not None
        try:  # the pipe almost always takes a request at once: no select before the write
            del self._out[: os.write(proc.stdin.fileno(), self._out)]
        except BlockingIOError:
            pass
        except OSError:  # the child is gone: its replies before this are still read in turn
            pass

    def collect(self, ticket: int) -> bytes:
        """The reply line of the request posted as ``ticket`` (each ticket once); replies to
        earlier tickets read on the way are kept for their own :meth:`collect`.

        Raises :class:`ChannelFailure` when that request failed (the child was killed and
        reaped; a fresh one answers the requests behind it, or the next post)."""
        while ticket not in self._replies:
            if not self._in_flight:
                raise ValueError(f"ticket {ticket} was never posted or was collected already")
            self._read_next()
        reply = self._replies.pop(ticket)
        if isinstance(reply, ChannelFailure):
            raise reply
        return reply

    def _read_next(self) -> None:
        """Read the reply to the oldest request in flight into ``_replies``; on a failure, that
        request gets it, the child is killed and the requests behind it go to a fresh child."""
        ticket, posted, timeout, _ = self._in_flight[0]
        proc = self._proc
        try:
            if proc is None:
                raise ChannelFailure(f"{self.what} was not running; restarted on the next call")
            if self._awaiting_ready:  # start-up ends at the child's ready line, not at the reply
                self._awaiting_ready, self._grace = False, 0.0
                began = time.monotonic()
                self.ready_line = self._read_line(proc, began, STARTUP_GRACE_S, self.timeout_s)
                self._answered = time.monotonic()
            grace, self._grace = self._grace, 0.0
            line = self._read_line(proc, max(posted, self._answered), grace, timeout)
        except ChannelFailure as exc:
            self._replies[ticket] = exc
            self._in_flight.popleft()
            behind = list(self._in_flight)
            self._in_flight.clear()
            self._out.clear()
            self._kill()
            for later, _, later_timeout, payload in behind:  # never answered: sent again
                self._send(later, payload, later_timeout)
            return
        self._in_flight.popleft()
        self._replies[ticket] = line
        self._answered = time.monotonic()

    def _behind_oldest(self) -> int:
        """The bytes of the requests in flight behind the oldest one."""
        return sum(len(line) + 1 for _, _, _, line in itertools.islice(self._in_flight, 1, None))

    def _poll_set(self, proc: procs.VendorProcess) -> select.poll:
        """The poll(2) set of ``proc``: made at its first read, kept for its next ones."""
        if self._polled is not proc:
            self._polled, self._poller, self._writing = proc, select.poll(), False
            self._poller.register(proc.stdout, select.POLLIN)
            self._poller.register(proc.stderr, select.POLLIN)
        return self._poller

    def _read_line(
        self, proc: procs.VendorProcess, began: float, grace: float, timeout_s: float
    ) -> bytes:
        """Read one line, writing what is left of the requests meanwhile, by ``began`` +
        ``timeout_s`` (+ ``grace`` until the child's first byte)."""
        deadline = began + timeout_s + grace
        poller = self._poll_set(proc)
        out, err, into = proc.stdout.fileno(), proc.stderr.fileno(), proc.stdin.fileno()
        buf = bytearray(self._buf)  # appended in place; only new bytes are searched for "\n"
        newline = buf.find(b"\n")
        while newline < 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                # no measured times in the reason: it is part of the episode's (reproducible) record
                extra = f"; start-up grace {grace:g}s" if grace else ""
                raise ChannelFailure(
                    f"no complete reply within {timeout_s:g}s (deadline of the whole "
                    f"call{extra}); {self.what} killed, restarted on the next call"
                )
            if bool(self._out) is not self._writing:
                self._writing = bool(self._out)
                if self._writing:
                    poller.register(into, select.POLLOUT)
                else:
                    poller.unregister(into)
            ready = [fd for fd, _ in poller.poll(procs.poll_ms(remaining))]
            if self._writing and into in ready:
                try:
                    del self._out[: os.write(into, self._out[:_CHUNK])]
                except BlockingIOError:
                    pass
                except (BrokenPipeError, OSError):
                    if len(self._out) > self._behind_oldest():
                        raise self._crashed(proc, "closed its input") from None
                    # only requests behind this one were unsent: they go to a fresh child if
                    # this one fails; its reply (or end of output) decides, as had they waited
                    self._out.clear()
            if err in ready and not self._drain_stderr(proc):
                poller.unregister(err)  # at its end: not polled again for this child
            if out in ready:
                data = proc.stdout.read(_CHUNK)
                if data is None:
                    continue
                if not data:
                    raise self._crashed(proc, "exited")
                if grace:  # start-up is over at the first byte: the reply itself gets timeout_s
                    deadline = min(deadline, time.monotonic() + timeout_s)
                    grace = 0.0
                found = data.find(b"\n")
                newline = -1 if found < 0 else len(buf) + found
                buf += data
                if newline < 0 and len(buf) > MAX_REPLY_BYTES:
                    raise ChannelFailure(
                        f"reply longer than {MAX_REPLY_BYTES >> 20} MiB without a newline; "
                        f"{self.what} killed, restarted on the next call"
                    )
        line, self._buf = bytes(buf[:newline]), bytes(buf[newline + 1 :])
        return line

    def end(self) -> None:
        """:meth:`close` in two halves, for safecert's own workers (``handshake``): ask the child
        to end now and return at once — its supervisor clears the subtree, which frees the
        worker's memory (a few milliseconds for a NumPy process), while the caller goes on — and
        let :meth:`close` reap it. A request after this goes to a fresh child, as after
        ``close``. A no-op while requests are in flight, and for a vendor's program (whose
        ``close`` is polite: end of input first, then time to exit)."""
        proc = self._proc
        if proc is None or not self.handshake or self._in_flight:
            return
        self._proc, self._unsettled = None, False
        self._ending.append(proc)
        proc.end()

    def close(self) -> None:
        """Close the child's stdin (a polite end of input), give it 1 s to exit, then kill and
        reap it and everything it started (safe to call twice). safecert's own workers
        (``handshake``) have nothing to save: they are killed at once (one :meth:`end` asked to
        end is reaped)."""
        proc = self._proc
        if proc is None or self.handshake:
            self._kill()
            return
        try:
            _close(proc.stdin)
            proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass
        self._kill()


class _Colocation:
    cpu: int | None = None
    depth = 0
    mask: set[int] | None = None
    lock: IO[bytes] | None = None
    #: the worker given a CPU of its own (:func:`colocated`'s ``apart``), that CPU and its lock
    apart: Channel | None = None
    apart_cpu: int | None = None
    apart_lock: IO[bytes] | None = None

    def cpu_of(self, channel: Channel) -> int | None:
        """The CPU a colocated worker runs on (None: not colocated)."""
        if channel is self.apart and self.apart_cpu is not None:
            return self.apart_cpu
        return self.cpu


_COLOCATION = _Colocation()
_LIVE_WORKERS: weakref.WeakSet[Channel] = weakref.WeakSet()


def _pin(pid: int, cpus: set[int]) -> None:
    with contextlib.suppress(OSError):  # a process that has just exited, a kernel that refuses
        os.sched_setaffinity(pid, cpus)


def _current_cpu() -> int | None:
    try:
        return int(ctypes.CDLL(None).sched_getcpu())
    except (OSError, AttributeError):
        return None


def _claim_cpu(allowed: set[int]) -> tuple[int, IO[bytes]] | None:
    """A CPU no other colocated safecert process holds (a lock file per CPU, released when this
    process ends), trying the one we run on first; None when every CPU is taken."""
    folder = Path(tempfile.gettempdir()) / f"safecert-cpu-{os.getuid()}"
    with contextlib.suppress(OSError):
        folder.mkdir(mode=0o700, exist_ok=True)
    here = _current_cpu()
    order = sorted(allowed, key=lambda c: (c != here, c))
    for cpu in order:
        try:
            fh = open(folder / f"{cpu}.lock", "wb")  # noqa: SIM115 - held while colocated
        except OSError:
            return None
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.close()
            continue
        return cpu, fh
    return None


@contextlib.contextmanager
def colocated(apart: Channel | None = None) -> Iterator[None]:
    """Run the calling thread and safecert's own worker processes (policy and environment
    workers, started now or later) on one CPU until the block ends.

    A rollout and its workers take strict turns (a request, then its reply), so they never need
    two CPUs at once, and a wake-up on another CPU costs far more than the work: measured on a
    2-vCPU virtual machine, a pipe round trip took 75–80 µs between CPUs and 8 µs on one. Each
    colocated process claims a CPU of its own (lock files), so rollout processes spread over the
    cores; with none left, nothing is pinned. Only safecert's own workers are pinned, never an
    ``exec:`` vendor (which may want several cores). Outcomes never depend on it.

    ``apart``: a worker that does not take strict turns with the rollout — one whose next request
    is posted before the last reply is read (:meth:`Channel.post`), so that it works while the
    rollout does — gets a second CPU of its own when one is free (claimed like the first);
    :func:`has_own_cpu` says whether it got one. Only a run that is alone on the machine's cores
    should ask (one rollout process: ``workers = 1``)."""
    if _COLOCATION.depth:
        _COLOCATION.depth += 1
        try:
            yield
        finally:
            _COLOCATION.depth -= 1
        return
    try:
        mask = os.sched_getaffinity(0)
    except (OSError, AttributeError):
        yield
        return
    claim = _claim_cpu(mask) if len(mask) > 1 else None
    if claim is None:
        yield
        return
    cpu, lock = claim
    second = _claim_cpu(mask - {cpu}) if apart is not None else None
    _COLOCATION.cpu, _COLOCATION.depth, _COLOCATION.mask, _COLOCATION.lock = cpu, 1, mask, lock
    if second is not None:
        _COLOCATION.apart, (_COLOCATION.apart_cpu, _COLOCATION.apart_lock) = apart, second
    _pin(0, {cpu})
    for channel in list(_LIVE_WORKERS):
        if channel.pid is not None:
            own = _COLOCATION.cpu_of(channel)
            _pin(channel.pid, {cpu if own is None else own})
    try:
        yield
    finally:
        held = _COLOCATION.apart_lock
        _COLOCATION.cpu, _COLOCATION.depth, _COLOCATION.mask = None, 0, None
        _COLOCATION.apart, _COLOCATION.apart_cpu, _COLOCATION.apart_lock = None, None, None
        _pin(0, mask)
        for channel in list(_LIVE_WORKERS):
            if channel.pid is not None:
                _pin(channel.pid, mask)
        lock.close()
        if held is not None:
            held.close()


def rejoin(channel: Channel) -> None:
    """Bring ``channel``'s worker back from its own CPU to the caller's (a no-op when it has
    none) and free that CPU: for a worker whose CPU turned out busy with other work."""
    if _COLOCATION.apart is not channel or _COLOCATION.cpu is None:
        return
    held = _COLOCATION.apart_lock
    _COLOCATION.apart, _COLOCATION.apart_cpu, _COLOCATION.apart_lock = None, None, None
    if channel.pid is not None:
        _pin(channel.pid, {_COLOCATION.cpu})
    if held is not None:
        held.close()


def cpu_seconds(pid: int) -> float | None:
    """The CPU time (user + system) process ``pid`` has used, from ``/proc`` (Linux; None
    elsewhere or when it has gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def has_own_cpu(channel: Channel) -> bool:
    """Whether ``channel``'s worker runs on a CPU of its own now (:func:`colocated`'s
    ``apart``): then posting its requests ahead of their replies lets it work while the caller
    does; on the caller's CPU it would only add context switches."""
    return _COLOCATION.apart is channel and _COLOCATION.apart_cpu is not None


def _close(*pipes: IO[bytes] | None) -> None:
    for pipe in pipes:
        if pipe is not None:
            try:
                pipe.close()
            except OSError:
                pass


def worker_command(module: str, *args: str) -> tuple[str, ...]:
    """``python -I -B -m MODULE ARGS``: one of safecert's own workers, run by this interpreter.

    ``-I`` (isolated): no ``PYTHON*`` variables, no user site-packages, no current folder on
    ``sys.path`` — the worker adds exactly the folder it was given; ``-B``: no bytecode written, so
    running vendor code leaves the hashed folder as it was."""
    return (sys.executable, "-I", "-B", "-m", module, *args)


def loadable_code(root: Path) -> list[Path]:
    """Every file that ``import`` can load from ``root`` once it is on ``sys.path``, sorted.

    That is: files with an import suffix (``.py``, ``.pyc``, extension modules) whose stem is an
    identifier, in ``root`` and in sub-folders named by identifiers (packages and namespace
    packages), plus their ``__pycache__`` bytecode; symbolic links are followed (Python follows
    them), each real folder once. More than :data:`MAX_CODE_FILES` is a ConfigError: hashing them
    all is not what anyone means — keep the policy in a folder of its own."""
    found: list[Path] = []
    seen: set[str] = set()
    root = Path(root)

    def walk(folder: Path, in_cache: bool) -> None:
        real = os.path.realpath(folder)
        if real in seen:
            return
        seen.add(real)
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            name = entry.name
            try:
                is_dir = entry.is_dir()
            except OSError:
                continue
            if is_dir:
                if not in_cache and (name.isidentifier() or name == "__pycache__"):
                    walk(Path(entry.path), name == "__pycache__")
                continue
            if _importable_name(name, in_cache):
                found.append(Path(entry.path))
                if len(found) > MAX_CODE_FILES:
                    raise ConfigError(
                        f"{root} holds more than {MAX_CODE_FILES} files Python can import",
                        field="policy",
                        fix="put the python: policy and environment in a folder of their own "
                        "(every importable file in the config's folder is hashed)",
                    )

    walk(root, False)
    return found


def listing_digest(root: Path) -> str:
    """SHA-256 of the sorted relative paths of :func:`loadable_code` under ``root`` (one per line):
    it changes when an importable file is added, removed or renamed."""
    root = Path(root)
    names = sorted(p.relative_to(root).as_posix() for p in loadable_code(root))
    return hashlib.sha256("\n".join(names).encode()).hexdigest()


def _importable_name(name: str, in_cache: bool) -> bool:
    for suffix in _LOADABLE_SUFFIXES:
        if name.endswith(suffix):
            stem = name[: -len(suffix)]
            if in_cache:  # __pycache__/mod.cpython-311.pyc, mod.cpython-311.opt-1.pyc
                stem = stem.partition(".")[0]
            return stem.isidentifier()
    return False


def locate_module(name: str, base_dir: Path) -> Path | None:
    """The file that ``import name`` would load with ``base_dir`` first on ``sys.path``, found
    without running any code (no parent package is imported); None when there is none."""
    search: list[str] | None = [str(base_dir), *sys.path]
    spec = None
    for i, part in enumerate(name.split(".")):
        if search is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(part, search)
        if spec is None:
            return None
        if i < len(name.split(".")) - 1:
            locations = spec.submodule_search_locations
            search = list(locations) if locations is not None else None
    if spec is None:
        return None
    if spec.origin and spec.origin not in ("built-in", "frozen") and Path(spec.origin).is_file():
        return Path(spec.origin)
    return None
