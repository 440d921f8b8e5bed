"""Parallel MILP solves: a persistent pool of solver processes for the split closure question.

:class:`SolvePool` runs :func:`~safecert.bnn.solvers.solve` on ``workers`` processes
(``forkserver``, started on the first solve, kept for the run, closed by :meth:`SolvePool.close` or
the ``with`` block). The workers are plain solver processes: each receives a :class:`Milp` and its
solve settings and hands back the :class:`SolveResult`; building the queries and replaying their
witnesses stay in the calling process.

Execution only, never an outcome: every solve runs single-threaded with a fixed seed and its own
work budget (``node_limit``), so a MILP solved in a worker gives the answer it gives in-process, and
the caller (:meth:`~safecert.bnn.verifier.Verifier.check_closure`) combines the pieces in a fixed
order after all of them are solved. The number of workers is therefore not part of any
certificate (``tests/bnn/test_split.py`` checks that 1 and 2 workers write the same outcome).

Processes: every worker dies with the process that owns the pool (:func:`safecert.procs.die_with_parent`
and :func:`safecert.procs.exit_with`, since the forkserver is the workers' parent). A solve waits at
most its own wall-clock guard plus :data:`GRACE_S`; one that has not answered by then ends as
``"timeout"`` and the pool is torn down (its workers killed and reaped) and opened afresh on the
next solve. A worker that died gives ``"error"``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from safecert import procs
from safecert.bnn.solvers import Milp, SolveResult, solve

#: seconds a solve may take beyond its own wall-clock guard before the pool gives up on it
GRACE_S = 30.0
#: seconds a closing pool waits for a worker to exit before it is killed
CLOSE_WAIT_S = 5.0


def default_workers() -> int:
    """The cores this process may run on (``sched_getaffinity``, else ``os.cpu_count()``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _init_worker(owner: int) -> None:
    procs.die_with_parent()
    procs.exit_with(owner, lambda: None)


def _solve(milp: Milp, solver: str, kwargs: dict[str, Any]) -> tuple[SolveResult, float]:
    """In a worker: the answer and the CPU seconds the worker spent on it."""
    t = time.process_time()
    result = solve(milp, solver, **kwargs)
    return result, time.process_time() - t


_CPU_LOCK = threading.Lock()
_WORKER_CPU_S = [0.0]


def worker_cpu_s() -> float:
    """CPU seconds the solver processes of this process's pools have spent on the solves they
    answered (added to this process's own CPU clock by :func:`safecert.bnn.cegis.cpu_clock`, so
    that a run's ``runtimes_s`` count the work done for it in its workers)."""
    with _CPU_LOCK:
        return _WORKER_CPU_S[0]


class SolvePool:
    """``workers`` solver processes (module docstring). ``workers = 1`` starts none: every solve
    runs in this process, one after another."""

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers = int(workers)
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> SolvePool:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.close(abort=exc_type is not None)  # an error or Ctrl-C: do not wait for the solves

    @property
    def parallel(self) -> bool:
        return self.workers > 1

    def submit(self, milp: Milp, solver: str, **kwargs: Any) -> Future[tuple[SolveResult, float]]:
        """Start one solve in a worker (the pool opens on the first call); the future holds the
        answer and the worker's CPU seconds for it."""
        if self._pool is None:
            ctx = mp.get_context("forkserver")
            ctx.set_forkserver_preload(["safecert.bnn.solvers", "highspy"])
            self._pool = ProcessPoolExecutor(
                self.workers, mp_context=ctx, initializer=_init_worker, initargs=(os.getpid(),)
            )
        return self._pool.submit(_solve, milp, solver, kwargs)

    def solve(self, milp: Milp, solver: str, **kwargs: Any) -> SolveResult:
        """``solve(milp, solver, **kwargs)`` in a worker (in this process with one worker)."""
        if not self.parallel:
            return solve(milp, solver, **kwargs)
        limit = kwargs.get("time_limit_s")
        future = self.submit(milp, solver, **kwargs)
        try:
            result, cpu = future.result(timeout=None if limit is None else float(limit) + GRACE_S)
        except FutureTimeout:
            self.close(abort=True)
            return SolveResult("timeout", solver, float(limit or 0.0), message="no answer")
        except BrokenProcessPool as exc:
            self.close(abort=True)
            return SolveResult("error", solver, 0.0, message=f"solver process died: {exc}")
        with _CPU_LOCK:
            _WORKER_CPU_S[0] += cpu
        return result

    def close(self, *, abort: bool = False) -> None:
        """Shut the pool down (idempotent). ``abort``: do not wait for solves in progress — every
        worker is terminated, and killed when it has not exited after :data:`CLOSE_WAIT_S`."""
        pool, self._pool = self._pool, None
        if pool is not None:
            procs.shutdown_pool(pool, abort=abort, wait_s=CLOSE_WAIT_S)
