"""``safecert.shield.deadline.acall_with_deadline``: user code awaited on an event loop under a
deadline, on the same reusable workers as the threaded form."""

from __future__ import annotations

import os
import threading
import time

import anyio
import pytest

from safecert.shield.deadline import (
    DeadlineExceeded,
    acall_with_deadline,
    call_with_deadline,
    wait_on_loop,
)


async def _loop_goes_on_while_a_hung_call_misses_its_deadline(hang, timeout_s: float) -> None:
    """Awaiting ``hang`` raises :class:`DeadlineExceeded` after ``timeout_s`` while another task
    keeps running on the loop, and the next call is answered."""
    ticks: list[int] = []

    async def ticker() -> None:
        for i in range(5):
            ticks.append(i)
            await anyio.sleep(0.01)

    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        with pytest.raises(DeadlineExceeded):
            await acall_with_deadline(hang, (), timeout_s)
        seen = list(ticks)
    assert seen == [0, 1, 2, 3, 4]  # the loop ran while the hung call was awaited
    assert await acall_with_deadline(lambda: "after", (), 5.0) == "after"


def test_value_exception_and_deadline_and_the_loop_goes_on():
    release = threading.Event()

    def hang() -> None:
        release.wait(30)

    async def main() -> None:
        assert await acall_with_deadline(lambda x: x + 1, (41,), 5.0) == 42
        with pytest.raises(KeyError, match="phi broke"):
            await acall_with_deadline(_boom, (), 5.0)
        await _loop_goes_on_while_a_hung_call_misses_its_deadline(hang, 0.3)

    try:
        anyio.run(main)
    finally:
        release.set()


def test_cancelling_the_await_abandons_the_worker_and_the_next_call_works():
    release = threading.Event()

    async def main() -> None:
        with anyio.move_on_after(0.2) as scope:
            await acall_with_deadline(release.wait, (30,), 30.0)
        assert scope.cancelled_caught
        assert await acall_with_deadline(lambda: 7, (), 5.0) == 7

    try:
        anyio.run(main)
    finally:
        release.set()


def test_a_task_that_waits_on_the_loop_first_gets_the_same_answers_and_deadline():
    """``wait_on_loop`` (the stdio gateway's calls): a quick answer is taken on the loop's thread,
    a slower one is still awaited through the loop, a hung one still misses its deadline while the
    loop goes on."""
    release = threading.Event()

    def slow() -> str:
        time.sleep(0.1)  # past the wait on the loop's thread, well within the deadline
        return "slow"

    async def main() -> None:
        wait_on_loop(0.02)
        assert await acall_with_deadline(lambda x: x + 1, (41,), 5.0) == 42
        with pytest.raises(KeyError, match="phi broke"):
            await acall_with_deadline(_boom, (), 5.0)
        assert await acall_with_deadline(slow, (), 5.0) == "slow"
        await _loop_goes_on_while_a_hung_call_misses_its_deadline(lambda: release.wait(30), 0.5)

    try:
        anyio.run(main)
    finally:
        release.set()


def _boom() -> None:
    raise KeyError("phi broke")


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux scheduling policies")
def test_user_code_runs_on_a_worker_whose_wake_up_does_not_preempt_its_caller():
    """The worker runs under ``SCHED_BATCH`` (its wake-up leaves the caller running until it
    waits); the caller's own policy is left as it was, on both the threaded and the awaited
    route."""
    before = os.sched_getscheduler(0)
    assert call_with_deadline(os.sched_getscheduler, (0,), 5.0) == os.SCHED_BATCH
    assert anyio.run(acall_with_deadline, os.sched_getscheduler, (0,), 5.0) == os.SCHED_BATCH
    assert os.sched_getscheduler(0) == before


def _where() -> tuple[int, set[int], int]:
    """In a worker: the CPU it runs on (the kernel's own record, ``/proc/thread-self/stat``
    field 39), the CPUs it may run on, its thread id."""
    with open("/proc/thread-self/stat") as f:
        cpu = int(f.read().rsplit(")", 1)[1].split()[36])
    return cpu, os.sched_getaffinity(0), threading.get_native_id()


def _in_a_thread(body) -> None:
    """Run ``body()`` on a thread of its own (its CPUs are its own to change; the test's thread
    keeps its own) and re-raise here what it raised."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            body()
        except BaseException as exc:  # re-raised in the test's thread
            failed.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30.0)
    assert not thread.is_alive() and not failed, failed


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux CPU affinity")
def test_a_waited_for_worker_runs_on_its_callers_cpu_and_is_let_go_otherwise():
    """A caller that blocks for the answer keeps its worker on the one CPU the caller runs on
    (the job ran there); awaited through the loop (no wait on the loop's thread) the worker may
    run on every CPU the process may use again; a worker abandoned at its deadline is let go
    onto all of them too (a hung callable does not hold its caller's CPU)."""
    allowed = os.sched_getaffinity(0)
    call_with_deadline(_where, (), 5.0)  # a new worker's thread id is known from then on
    for _ in range(3):
        ran_on, affinity, _ = call_with_deadline(_where, (), 5.0)
        assert affinity == {ran_on} and ran_on in allowed

    async def awaited(wait: float) -> tuple[int, set[int], int]:
        wait_on_loop(wait)
        return await acall_with_deadline(_where, (), 5.0)

    ran_on, affinity, _ = anyio.run(awaited, 0.01)  # waited for on the loop's thread: kept
    assert affinity == {ran_on}
    assert anyio.run(awaited, 0.0)[1] == allowed  # answered through the loop: let go

    call_with_deadline(_where, (), 5.0)  # kept on one CPU again
    release = threading.Event()
    hung: list[int] = []

    def hang() -> None:
        hung.append(threading.get_native_id())
        release.wait(30.0)

    try:
        with pytest.raises(DeadlineExceeded):
            call_with_deadline(hang, (), 0.2)
        assert os.sched_getaffinity(hung[0]) == allowed
        assert call_with_deadline(_where, (), 5.0)[2] != hung[0]  # another worker answers
    finally:
        release.set()


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="Linux CPU affinity, two CPUs",
)
def test_a_caller_that_moves_takes_the_worker_kept_on_its_new_cpu_and_none_is_moved():
    """Workers are kept on one CPU each, for good: a caller that runs on another CPU than before
    gets another worker, kept there, and the first stays where it was (no thread is moved, which
    would cost a system call and, were it still running, a stop of its CPU); back on the first
    CPU, the caller gets its first worker again."""
    a, b = sorted(os.sched_getaffinity(0))[:2]
    seen: list[tuple[int, set[int], int]] = []
    kept: list[set[int]] = []

    def caller() -> None:
        for cpu in (a, b, a):
            os.sched_setaffinity(0, {cpu})
            seen.append(call_with_deadline(_where, (), 5.0))
            kept.append(os.sched_getaffinity(seen[0][2]))

    _in_a_thread(caller)
    assert [(ran_on, affinity) for ran_on, affinity, _ in seen] == [
        (a, {a}), (b, {b}), (a, {a})
    ]  # fmt: skip
    assert seen[1][2] != seen[0][2] and seen[2][2] == seen[0][2]
    assert kept == [{a}, {a}, {a}]  # the first worker never left its CPU


@pytest.mark.skipif(
    not hasattr(os, "fork") or not hasattr(os, "sched_setaffinity"), reason="fork, CPU affinity"
)
def test_a_forked_child_gets_answers_from_workers_of_its_own():
    """The pooled workers' threads are not copied into a child made by ``fork()``: its first call
    is answered by a worker of its own instead of being handed to one that will never run (and
    failing closed at its deadline)."""
    outcome: list[int] = []

    def parent() -> None:  # one CPU, so that the child's call looks in the pool just filled
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        call_with_deadline(_where, (), 5.0)  # a worker pooled for that CPU
        pid = os.fork()
        if pid == 0:  # the child: only this thread was copied
            try:
                ok = call_with_deadline(lambda: "answer", (), 2.0) == "answer"
            except BaseException:
                ok = False
            os._exit(0 if ok else 1)
        outcome.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))

    _in_a_thread(parent)
    assert outcome == [0]


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="Linux CPU affinity, two CPUs",
)
def test_once_a_caller_is_woken_elsewhere_every_wait_is_held_on_its_cpu_and_put_back(monkeypatch):
    """Until a caller is seen woken on another CPU than it waited on, a wait leaves the caller's
    CPUs alone. The first caller moved while it waited (here the job itself moves it) turns
    holding on, for the process: from then on a caller may run only on its own CPU while it waits
    — where its worker is kept, so the worker's hand-back wakes it there — and gets its own CPU
    set back as the answer is in, also when the job raised or missed its deadline."""
    from safecert.shield import deadline

    monkeypatch.setattr(deadline, "_callers_move", [False])
    a, b = sorted(os.sched_getaffinity(0))[:2]
    seen: list[object] = []

    def caller() -> None:  # on two CPUs
        me = threading.get_native_id()
        os.sched_setaffinity(0, {a, b})
        seen.append(call_with_deadline(os.sched_getaffinity, (me,), 5.0))  # not held
        deadline._callers_move[0] = False  # in case the scheduler itself moved the caller

        def move_the_caller() -> int:  # the caller sleeps on its CPU; it wakes on the other
            waited_on = next(iter(os.sched_getaffinity(0)))  # the worker's = the caller's CPU
            os.sched_setaffinity(me, {a, b} - {waited_on})
            return waited_on

        call_with_deadline(move_the_caller, (), 5.0)
        seen.append(list(deadline._callers_move))
        os.sched_setaffinity(0, {a, b})
        during = call_with_deadline(os.sched_getaffinity, (me,), 5.0)
        seen.append((during, os.sched_getaffinity(0)))
        with pytest.raises(ZeroDivisionError):
            call_with_deadline(lambda: 1 / 0, (), 5.0)
        seen.append(os.sched_getaffinity(0))
        release = threading.Event()
        with pytest.raises(DeadlineExceeded):
            call_with_deadline(release.wait, (30.0,), 0.2)
        release.set()
        seen.append(os.sched_getaffinity(0))

    _in_a_thread(caller)
    assert seen[0] == {a, b}  # nobody moved yet: the wait was not held
    assert seen[1] == [True]  # the caller was woken on the other CPU
    during, after = seen[2]
    assert len(during) == 1 and during <= {a, b} and after == {a, b}  # held, then put back
    assert seen[3] == {a, b} and seen[4] == {a, b}  # put back after an exception, a deadline
