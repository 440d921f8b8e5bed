"""Calling user code with a deadline, without holding anything other calls need.

The guard calls user code — the abstraction φ, a Python action map — on every step. That code may
hang. :func:`call_with_deadline` runs it on a reusable daemon worker thread and waits at most the
deadline, so a hung callable costs its own call the deadline (the caller then fails closed) and
holds no lock, worker or pool slot any other call needs.

A hand-off is two thread wake-ups (the worker's and the caller's): each worker has a pair of
plain locks — ``go``, on which it waits for a job, and ``done``, on which its caller waits for
the answer — reused from call to call, so a call allocates no queue, event or future. Workers are
kept in a pool and reused while they answer in time; the caller puts its worker back once it has
read the answer. A worker's wake-up does not preempt its caller (``SCHED_BATCH`` on Linux): the
caller first goes on to wait, which lets go of the GIL, instead of being switched out for a worker
that would only find the GIL held (a third of a hand-off's CPU time). A caller that blocks for
the answer (the threaded form; the loop's own wait below) takes a worker kept on the CPU it runs
on itself (:func:`_caller_cpu`), which it leaves free while it waits: the worker does not wait for
an idle CPU to wake up. Workers are pooled per CPU and never moved: a caller that moves to another
CPU takes that CPU's worker, so no call pays for moving a thread (a system call, and a stop of the
other CPU if the worker is still running there). Awaited on an event
loop (:func:`acall_with_deadline`) the answer comes back through the loop (a wake-up of its
self-pipe and two loop iterations more), unless the awaiting task asked, with
:func:`wait_on_loop`, to wait for it on the loop's own thread first for a short while: the loop
stalls no longer than that (the GIL is the worker's anyway), which pays where the loop has nothing
else to do meanwhile — a stdio gateway's one connection — and not where other sessions' requests
wait on the same loop.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

#: the wait on the loop's thread a one-caller loop asks for (:func:`wait_on_loop`). Not shorter:
#: a lock waited for with a timeout under about 5 ms took 8–10 µs longer to be woken (p50 of a
#: hand-off 19–20 µs at 1 ms, 7–10 µs at 5–50 ms; ``benchmarks/RESULTS_guard.md``)
LOOP_WAIT_S = 0.01
_LOOP_WAIT: ContextVar[float] = ContextVar("safecert_deadline_loop_wait", default=0.0)

Answer = tuple[bool, Any]  # (returned, value or the exception raised)


def wait_on_loop(seconds: float) -> None:
    """Let :func:`acall_with_deadline`, awaited in the current context (this task and the tasks it
    starts), wait up to ``seconds`` for the answer on the loop's own thread before it yields."""
    _LOOP_WAIT.set(seconds)


class DeadlineExceeded(Exception):
    """A user callable did not return within its deadline (its thread is abandoned)."""


class _Worker:
    """A reusable daemon thread that runs one job at a time.

    The caller that took it from the pool sets ``job`` and releases ``go``; the worker runs the
    job, stores ``answer`` and releases ``done``. ``mutex`` orders the end of a job against a
    caller that stops waiting (a missed deadline: ``abandoned``; an event loop that will be woken
    instead: ``notify``): either the caller finds ``done`` released, or the worker sees what the
    caller set."""

    __slots__ = ("go", "done", "mutex", "job", "answer", "abandoned", "notify", "tid", "cpu")

    def __init__(self, cpu: int | None) -> None:
        self.go = threading.Lock()
        self.done = threading.Lock()
        self.mutex = threading.Lock()
        self.go.acquire()
        self.done.acquire()
        self.job: tuple[Callable[..., Any], tuple[Any, ...]] | None = None
        self.answer: Answer = (False, None)
        self.abandoned = False
        self.notify: Callable[[], object] | None = None
        self.tid: int | None = None  # its thread's id, set by the thread as it starts
        self.cpu = cpu  # the CPU it is kept on, for good (its pool); None: any the process may use
        threading.Thread(target=self._run, daemon=True, name="safecert-deadline").start()

    def _run(self) -> None:
        _no_wakeup_preemption()
        go, done, mutex = self.go, self.done, self.mutex
        with mutex:  # against give_up(): a worker abandoned before it started is never kept
            self.tid = threading.get_native_id()
            if self.cpu is not None and not self.abandoned:
                try:
                    os.sched_setaffinity(0, {self.cpu})
                except OSError:  # a CPU no longer allowed: it runs where the process may
                    pass
        while True:
            go.acquire()
            fn, args = self.job  # type: ignore[misc]
            self.job = None
            try:
                answer: Answer = (True, fn(*args))
            except BaseException as exc:  # handed to the caller
                answer = (False, exc)
            with mutex:
                if self.abandoned:
                    return  # its caller gave up on it: this thread leaves the pool for good
                self.answer = answer
                notify, self.notify = self.notify, None
                done.release()  # the last thing before waiting again: the caller gets the GIL
            if notify is not None:
                try:
                    notify()
                except RuntimeError:  # the caller's event loop is gone
                    pass

    def start(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.job = (fn, args)
        self.go.release()

    def take(self) -> Answer:
        """The answer of a finished job; the worker goes back to its CPU's pool."""
        answer, self.answer = self.answer, (False, None)
        _idle[self.cpu].append(self)
        return answer

    def give_up(self) -> Answer | None:
        """Stop waiting: the answer if it came in the gap (the worker goes back to the pool),
        else ``None`` and the worker is abandoned."""
        with self.mutex:
            if self.done.acquire(blocking=False):
                return self.take()
            self.abandoned = True
            tid = self.tid  # None: not started, and it will not keep a CPU (_run)
        if self.cpu is not None and tid is not None:
            try:  # a hung callable keeps a CPU busy, but not its caller's
                os.sched_setaffinity(tid, os.sched_getaffinity(0))
            except OSError:  # the thread is gone, or the process's CPUs changed
                pass
        return None

    def wake(self, notify: Callable[[], object]) -> Answer | None:
        """Have ``notify()`` called once the answer is in (``done`` released by then), unless it
        is in already: then it is returned and the worker goes back to the pool."""
        with self.mutex:
            if self.done.acquire(blocking=False):
                return self.take()
            self.notify = notify
            return None


def _no_wakeup_preemption() -> None:
    """Put the calling thread under ``SCHED_BATCH`` (Linux; elsewhere nothing): same priority
    and CPU share, but its wake-up does not preempt the thread that woke it. Its caller then goes
    on to wait for the answer — which lets go of the GIL — before the worker runs; otherwise the
    worker runs at once, finds the GIL held, and both threads are switched out and in again.
    The user code run on the worker (and any process it starts) runs under that policy too."""
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except (AttributeError, OSError):  # not Linux, or refused: the default policy still works
        pass


def _cpu_lookup() -> Callable[[], int] | None:
    """``sched_getcpu()`` of the C library (the CPU the calling thread runs on; a vDSO read, no
    system call), or ``None`` where threads cannot be kept on a CPU (not Linux)."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    try:
        import ctypes

        getcpu = ctypes.CDLL(None).sched_getcpu
    except (OSError, AttributeError):
        return None
    getcpu.restype, getcpu.argtypes = ctypes.c_int, []
    return getcpu


#: idle workers by the CPU they are kept on (None: not kept); list.append/pop are atomic under
#: the GIL, and a pool is added once per CPU (dict.setdefault is atomic too)
_idle: dict[int | None, list[_Worker]] = {None: []}
_getcpu: list[Callable[[], int] | None] = []  # [_cpu_lookup()], resolved on first use


def _forget_workers() -> None:
    """In a child process after ``fork()``: the pooled workers' threads were not copied into it,
    so they are dropped (a job handed to one would never run and its call would fail closed at
    its deadline); the child starts its own workers as it needs them."""
    _idle.clear()
    _idle[None] = []


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_workers)


def _submit(fn: Callable[..., Any], args: tuple[Any, ...], cpu: int | None) -> _Worker:
    """Start ``fn(*args)`` on an idle worker kept on ``cpu`` (``None``: one not kept on any CPU),
    a new one if none is idle."""
    pool = _idle.get(cpu)
    if pool is None:
        pool = _idle.setdefault(cpu, [])
    try:
        worker = pool.pop()
    except IndexError:
        worker = _Worker(cpu)
    worker.start(fn, args)
    return worker


def _caller_cpu() -> int | None:
    """The CPU the calling thread runs on (``None``: unknown). A caller that blocks while its
    worker runs leaves that CPU free for it, and a worker woken there starts at once, while one
    woken on an idle CPU waits for that CPU to wake up (a hand-off of 8 µs on one CPU, 24 µs
    across two idle vCPUs; ``benchmarks/RESULTS_guard.md``). The caller is held on that CPU
    only while it waits (:func:`_hold`); from one call to the next it stays free to move, and
    then takes the worker kept where it runs."""
    if not _getcpu:
        _getcpu.append(_cpu_lookup())
    getcpu = _getcpu[0]
    if getcpu is None:
        return None
    cpu = getcpu()
    return cpu if cpu >= 0 else None


#: ``[True]`` once a caller was woken on another CPU than the one it waited on: from then on,
#: in this process, every wait is held (:func:`_hold`)
_callers_move: list[bool] = [False]


def _hold(cpu: int | None) -> set[int] | None:
    """Keep the calling thread on ``cpu`` — the CPU it runs on, where its worker is kept — for
    the length of one wait for an answer, once this process has seen a caller moved
    (:func:`_let_go`); returns the thread's own CPU set, for :func:`_let_go` to put back
    (``None``: nothing was changed).

    Why: while the worker hands the answer back it still runs on that CPU, so a kernel may wake
    a caller free to move on the *other* CPU when that one is idle — and on a VM an idle vCPU
    first has to be woken itself. Where that happens it sets the tail (the slowest 1 % of checks
    with a Python action map: 44–95 µs against a p50 of 15 µs, 120–160 of 20,000 callers moved;
    ``benchmarks/RESULTS_guard.md``). Held, the caller is woken where it waited and runs as soon
    as the worker goes back to waiting. It costs two system calls (about 2 µs a check), so it is
    done only where callers were seen to move; between checks the thread runs wherever it may.
    Only the threaded form holds (:func:`call_with_deadline`). A wait on an event loop's thread
    (:func:`acall_with_deadline`) is not held: a gateway's loop shares the CPUs with its client
    and upstream, which the reply it has just written wakes, and holding it was not seen to help
    there (``benchmarks/RESULTS_guard.md``)."""
    if cpu is None or not _callers_move[0]:
        return None
    try:
        own = os.sched_getaffinity(0)
        if len(own) < 2 or cpu not in own:
            return None
        os.sched_setaffinity(0, (cpu,))
    except OSError:  # affinity refused here: the caller waits unheld, as it would elsewhere
        return None
    return own


def _let_go(cpu: int | None, own: set[int] | None) -> None:
    """After a wait on ``cpu``: put back the CPU set :func:`_hold` changed, if it changed one;
    else note whether the caller was woken on another CPU (then later waits are held)."""
    if own is not None:
        try:
            os.sched_setaffinity(0, own)
        except OSError:  # the process's CPUs changed meanwhile: every CPU it may still use
            os.sched_setaffinity(0, range(os.cpu_count() or 1))
    elif cpu is not None and not _callers_move[0] and _caller_cpu() != cpu:
        _callers_move[0] = True


def _result(answer: Answer) -> Any:
    ok, value = answer
    if not ok:
        raise value
    return value


def call_with_deadline(fn: Callable[..., Any], args: tuple[Any, ...], timeout_s: float) -> Any:
    """``fn(*args)`` on a worker thread, waited for at most ``timeout_s`` seconds.

    Re-raises what ``fn`` raised; raises :class:`DeadlineExceeded` on timeout. Workers are reused
    while they answer in time; a worker that misses a deadline is abandoned (Python cannot kill a
    thread; it is a daemon and never rejoins the pool), so a hung callable holds no worker, lock or
    slot any other call needs."""
    cpu = _caller_cpu()
    own = _hold(cpu)
    try:
        worker = _submit(fn, args, cpu)
        in_time = worker.done.acquire(timeout=timeout_s)
    finally:
        _let_go(cpu, own)
    if in_time:
        return _result(worker.take())
    answer = worker.give_up()
    if answer is None:
        raise DeadlineExceeded(f"no answer within {timeout_s:g} s")
    return _result(answer)


async def acall_with_deadline(
    fn: Callable[..., Any], args: tuple[Any, ...], timeout_s: float
) -> Any:
    """:func:`call_with_deadline` for an asyncio event loop: the same workers and the same
    guarantee. The answer is awaited without blocking the loop (the worker hands it to the loop),
    after a wait on the loop's thread where the task asked for one (:func:`wait_on_loop`; the loop
    stalls no longer than that), within ``timeout_s`` in all. Cancelling the await abandons the
    worker as a timeout does."""
    start = time.monotonic()
    blocking = min(_LOOP_WAIT.get(), timeout_s)
    worker = _submit(fn, args, _caller_cpu() if blocking > 0 else None)
    if blocking > 0 and worker.done.acquire(timeout=blocking):
        return _result(worker.take())
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()

    def answered() -> None:  # on the loop
        if not future.done():
            future.set_result(None)

    here = worker.wake(lambda: loop.call_soon_threadsafe(answered))
    if here is not None:
        return _result(here)
    try:
        async with asyncio.timeout(max(0.0, timeout_s - (time.monotonic() - start))):
            await future
    except TimeoutError:
        late = worker.give_up()
        if late is None:
            raise DeadlineExceeded(f"no answer within {timeout_s:g} s") from None
        return _result(late)
    except BaseException:  # cancelled: nobody will read the answer
        worker.give_up()
        raise
    worker.done.acquire()  # released before the loop was woken: no wait
    return _result(worker.take())
