"""Calling user code with a deadline, without holding anything other calls need.

The guard calls user code — the abstraction φ, a Python action map — on every step. That code may
hang. :func:`call_with_deadline` runs it on a reusable daemon worker thread and waits at most the
deadline, so a hung callable costs its own call the deadline (the caller then fails closed) and
holds no lock, worker or pool slot any other call needs.

A hand-off costs two thread wake-ups (the worker's and the caller's): workers are kept in a pool
and reused while they answer in time. Awaited on an event loop (:func:`acall_with_deadline`) the
answer comes back through the loop (a wake-up of its self-pipe and two loop iterations more),
unless the awaiting task asked, with :func:`wait_on_loop`, to wait for it on the loop's own thread
first for a short while: the loop stalls no longer than that (the GIL is the worker's anyway), which
pays where the loop has nothing else to do meanwhile — a stdio gateway's one connection — and not
where other sessions' requests wait on the same loop.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

#: the wait on the loop's thread a one-caller loop asks for (:func:`wait_on_loop`)
LOOP_WAIT_S = 0.001
_LOOP_WAIT: ContextVar[float] = ContextVar("safecert_deadline_loop_wait", default=0.0)


def wait_on_loop(seconds: float) -> None:
    """Let :func:`acall_with_deadline`, awaited in the current context (this task and the tasks it
    starts), wait up to ``seconds`` for the answer on the loop's own thread before it yields."""
    _LOOP_WAIT.set(seconds)


class DeadlineExceeded(Exception):
    """A user callable did not return within its deadline (its thread is abandoned)."""


class _Job:
    __slots__ = ("answer", "abandoned", "notify")

    def __init__(self) -> None:
        self.answer: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()
        self.abandoned = False
        # set by a caller that stopped blocking on ``answer``: called with the answer as well
        self.notify: Callable[[tuple[bool, Any]], None] | None = None


class _Worker:
    """A reusable daemon thread that runs one job at a time."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...], _Job]] = (
            queue.SimpleQueue()
        )
        threading.Thread(target=self._run, daemon=True, name="safecert-deadline").start()

    def _run(self) -> None:
        while True:
            fn, args, job = self.jobs.get()
            try:
                answer: tuple[bool, Any] = (True, fn(*args))
            except BaseException as exc:  # handed to the caller
                answer = (False, exc)
            # back in the pool before answering, so that once the caller is woken this thread
            # only goes back to waiting (it does not hold the GIL the caller needs)
            rejoin = not job.abandoned
            if rejoin:
                _idle.append(self)
            job.answer.put(answer)
            # read after the put: a caller that set ``notify`` and then found ``answer`` empty is
            # notified here (one that found it full just gets a second, ignored, notice)
            notify = job.notify
            if notify is not None:
                try:
                    notify(answer)
                except RuntimeError:  # the caller's event loop is gone
                    pass
            if not rejoin:
                return  # its caller gave up on it: this thread leaves the pool for good


_idle: list[_Worker] = []  # list.append/pop are atomic under the GIL


def _submit(fn: Callable[..., Any], args: tuple[Any, ...]) -> _Job:
    try:
        worker = _idle.pop()
    except IndexError:
        worker = _Worker()
    job = _Job()
    worker.jobs.put((fn, args, job))
    return job


def _result(answer: tuple[bool, Any]) -> Any:
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
    job = _submit(fn, args)
    try:
        return _result(job.answer.get(timeout=timeout_s))
    except queue.Empty:
        job.abandoned = True
        try:  # answered in the gap after all
            return _result(job.answer.get_nowait())
        except queue.Empty:
            raise DeadlineExceeded(f"no answer within {timeout_s:g} s") from None


async def acall_with_deadline(
    fn: Callable[..., Any], args: tuple[Any, ...], timeout_s: float
) -> Any:
    """:func:`call_with_deadline` for an asyncio event loop: the same workers and the same
    guarantee. The answer is awaited without blocking the loop (the worker hands it to the loop),
    after a wait on the loop's thread where the task asked for one (:func:`wait_on_loop`; the loop
    stalls no longer than that), within ``timeout_s`` in all. Cancelling the await abandons the
    worker as a timeout does."""
    start = time.monotonic()
    job = _submit(fn, args)
    blocking = min(_LOOP_WAIT.get(), timeout_s)
    if blocking > 0:
        try:
            return _result(job.answer.get(timeout=blocking))
        except queue.Empty:
            pass
    loop = asyncio.get_running_loop()
    future: asyncio.Future[tuple[bool, Any]] = loop.create_future()

    def answered(answer: tuple[bool, Any]) -> None:  # on the loop
        if not future.done():
            future.set_result(answer)

    job.notify = lambda answer: loop.call_soon_threadsafe(answered, answer)
    try:  # answered before ``notify`` was set: the worker may not have seen it
        return _result(job.answer.get_nowait())
    except queue.Empty:
        pass
    try:
        async with asyncio.timeout(max(0.0, timeout_s - (time.monotonic() - start))):
            answer = await future
    except TimeoutError:
        job.abandoned = True
        raise DeadlineExceeded(f"no answer within {timeout_s:g} s") from None
    except BaseException:  # cancelled: nobody will read the answer
        job.abandoned = True
        raise
    return _result(answer)
