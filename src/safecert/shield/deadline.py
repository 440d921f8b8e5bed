"""Calling user code with a deadline, without holding anything other calls need.

The guard calls user code — the abstraction φ, the action map — on every proposal. That code may
hang. :func:`call_with_deadline` runs it in a fresh daemon thread and waits at most the deadline,
so a hung callable costs its own call the deadline (the caller then fails closed) and holds no
lock, worker or pool slot any other call needs.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any


class DeadlineExceeded(Exception):
    """A user callable did not return within its deadline (its thread is abandoned)."""


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
            if job.notify is not None:
                try:
                    job.notify(answer)
                except RuntimeError:  # the caller's event loop is gone
                    pass
            else:
                job.answer.put(answer)
            if not rejoin:
                return  # its caller gave up on it: this thread leaves the pool for good


class _Job:
    __slots__ = ("answer", "abandoned", "notify")

    def __init__(self, notify: Callable[[tuple[bool, Any]], None] | None = None) -> None:
        self.answer: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()
        self.abandoned = False
        self.notify = notify  # set: the answer goes there (an event loop), not to ``answer``


_idle: list[_Worker] = []  # list.append/pop are atomic under the GIL


def call_with_deadline(fn: Callable[..., Any], args: tuple[Any, ...], timeout_s: float) -> Any:
    """``fn(*args)`` on a worker thread, waited for at most ``timeout_s`` seconds.

    Re-raises what ``fn`` raised; raises :class:`DeadlineExceeded` on timeout. Workers are reused
    while they answer in time; a worker that misses a deadline is abandoned (Python cannot kill a
    thread; it is a daemon and never rejoins the pool), so a hung callable holds no worker, lock or
    slot any other call needs."""
    try:
        worker = _idle.pop()
    except IndexError:
        worker = _Worker()
    job = _Job()
    worker.jobs.put((fn, args, job))
    try:
        ok, value = job.answer.get(timeout=timeout_s)
    except queue.Empty:
        job.abandoned = True
        try:  # answered in the gap after all
            ok, value = job.answer.get_nowait()
        except queue.Empty:
            raise DeadlineExceeded(f"no answer within {timeout_s:g} s") from None
    if not ok:
        raise value
    return value


async def acall_with_deadline(
    fn: Callable[..., Any], args: tuple[Any, ...], timeout_s: float
) -> Any:
    """:func:`call_with_deadline` for an asyncio event loop: the same workers and the same
    guarantee, awaited without blocking the loop or a second thread (the worker hands its answer
    to the loop). Cancelling the await abandons the worker as a timeout does."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[tuple[bool, Any]] = loop.create_future()

    def answered(answer: tuple[bool, Any]) -> None:  # on the loop
        if not future.done():
            future.set_result(answer)

    try:
        worker = _idle.pop()
    except IndexError:
        worker = _Worker()
    job = _Job(lambda answer: loop.call_soon_threadsafe(answered, answer))
    worker.jobs.put((fn, args, job))
    try:
        async with asyncio.timeout(timeout_s):
            ok, value = await future
    except TimeoutError:
        job.abandoned = True
        raise DeadlineExceeded(f"no answer within {timeout_s:g} s") from None
    except BaseException:  # cancelled: nobody will read the answer
        job.abandoned = True
        raise
    if not ok:
        raise value
    return value
