"""Where episodes run: the Backend protocol, a worker's state and the local process pool.

A :class:`RunContext` (picklable) is everything a worker needs to build its oracle and the wrapped
environments of every cell. :class:`Worker` builds them once, lazily, and runs chunks of jobs of
one cell with :func:`safecert.blackbox.rollout.run_lockstep` on :func:`episodes_per_worker` env
copies (``lockstep`` × ``batch_size``: one oracle call per ``batch_size`` rows, the calls of a
step in one round trip to a policy worker; for the only worker of a run, two round trips a step,
one per half of the copies, the policy worker answering one half while the other steps when it
has a CPU of its own).
:class:`LocalBackend` runs chunks in-process (``workers = 1``) or on a ``forkserver`` process pool
and yields records in completion order: a fixed list (:meth:`LocalBackend.run`) or the chunks a
:class:`JobSource` hands out as workers free up (:meth:`LocalBackend.stream`: the sequential
scheduler, which decides what to run next from the records seen so far). BB-seq's Ray backend
implements the same protocol.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.util as mp_util
import os
import signal
import time
from collections.abc import Generator, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import ExitStack, contextmanager, nullcontext, suppress
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from safecert import procs
from safecert.blackbox.config import RunConfig
from safecert.blackbox.jobs import EpisodeJob, EpisodeRecord
from safecert.blackbox.oracles import Oracle, OracleSpec, lockstep_calls, make_oracle
from safecert.blackbox.oracles.base import CallResult, PostCalls, Reply
from safecert.blackbox.plan import has_workers

if TYPE_CHECKING:
    from safecert.isolation import Channel


@dataclass(frozen=True)
class RunContext:
    """Picklable description of a run: config, its folder, cells, ranges and the oracle spec."""

    config: RunConfig
    base_dir: str
    cells: tuple[dict[str, Any], ...]
    obs_ranges: tuple[float, ...] | None
    oracle: OracleSpec
    #: a sequential run (its episodes in flight when a cell decides are its overshoot)
    sequential: bool = False


#: K when the config names no ``lockstep`` and the run is fixed-N, for a policy in a policy
#: worker (a step's 16 calls share one pipe round trip: ≈ 30 µs on an idle core, 200 µs under
#: load, against a cheap simulator step of ≈ 20 µs) and for a ``python:`` policy in process (the
#: step's bookkeeping — observations to float64, the action checks — is done once for 16 rows
#: instead of once per row: CartPole's loop 1.30–1.36× the hand loop's CPU instead of
#: 1.38–1.64× at K = 1, same runs at load 7; benchmarks/RESULTS_speed.md, round 4)
LOCKSTEP_DEFAULT = 16
#: K for a lone run's policy worker (``workers = 1``), which may answer one half of the copies on
#: a CPU of its own while the rollout steps the other half: a half of 32 rows (≈ 500 µs of
#: CartPole steps) covers the worker's wake-up on another CPU (75–80 µs a round trip on a 2-vCPU
#: virtual machine) and its 32 calls with room to spare (whole SafeCartPole runs, same run:
#: K = 64 1.08× the hand loop, K = 32 1.29×; benchmarks/RESULTS_speed.md, round 6). An ONNX
#: model's policy worker keeps :data:`LOCKSTEP_DEFAULT` when alone: such a model usually drives a
#: physics simulator, whose copies are costly to build (SafeHalfCheetahVelocity: 8 ms each, so 64
#: copies are 0.5 s of a 5-second run) and whose steps are slow enough (≈ 80 µs) that a half of 8
#: rows covers the worker's wake-up on another CPU and its 8 calls (the rollout's instructions a
#: step, K = 8: 409k, 16: 399k, 32: 393k, 64: 391k, the hand loop's 411k; RESULTS_speed.md,
#: round 8)
LOCKSTEP_APART = 64


def lockstep(ctx: RunContext, *, alone: bool = False) -> int:
    """K, the episodes a worker steps together per ``batch_size`` rows: the config's
    ``lockstep``, else :data:`LOCKSTEP_DEFAULT` in a fixed-N run for a policy in a policy worker
    or a ``python:`` policy in process (every episode is run anyway), and 1 otherwise: an ONNX,
    SB3 or TorchScript model in process, ``exec:`` and HTTP policies spend their time in the
    call itself, so K copies of the environment would buy little, and a sequential run's
    episodes in flight are those it may run past a decision (none with one worker and
    ``batch_size = 1``). ``alone``: the run's only worker, whose policy worker gets
    :data:`LOCKSTEP_APART` (an ONNX model's: :data:`LOCKSTEP_DEFAULT`). Never changes an
    outcome: each row is its own oracle call either way."""
    if ctx.config.lockstep is not None:
        return ctx.config.lockstep
    cheap_steps = ctx.oracle.in_worker or ctx.oracle.kind == "python"
    if not cheap_steps or ctx.sequential:
        return 1
    apart = alone and ctx.oracle.in_worker and ctx.oracle.kind != "onnx"
    return LOCKSTEP_APART if apart else LOCKSTEP_DEFAULT


def episodes_per_worker(ctx: RunContext, *, alone: bool = False) -> int:
    """The episodes one worker runs at once: ``lockstep`` × ``batch_size`` (its env copies per
    cell; in flight per worker in a sequential run)."""
    return lockstep(ctx, alone=alone) * ctx.config.batch_size


class JobSource(Protocol):
    """Hands a backend its work one chunk at a time, as workers free up.

    ``per_worker``: the chunks one worker may hold at once (in flight: ``per_worker`` × workers
    chunks). :meth:`take` is called whenever a worker has room, after every record of a finished
    chunk has been yielded to the consumer (who may have updated the source in between)."""

    per_worker: int

    def take(self) -> list[EpisodeJob]:
        """The next chunk (jobs of one cell), or ``[]`` when none may start until a running chunk
        ends; ``[]`` while nothing runs ends the stream."""
        ...


class ListSource:
    """A fixed list of jobs in chunks of ``size`` (never mixing cells), ``per_worker`` at a time:
    what a fixed-N run (and :meth:`Backend.run`) streams."""

    def __init__(self, jobs: Sequence[EpisodeJob], size: int, per_worker: int = 2) -> None:
        self.per_worker = per_worker
        self._chunks = iter(chunked(jobs, size))

    def take(self) -> list[EpisodeJob]:
        return next(self._chunks, [])


class Backend(Protocol):
    def run(self, jobs: Sequence[EpisodeJob], ctx: RunContext) -> Iterator[EpisodeRecord]:
        """Run every job once; yield each record as soon as it is done (any order)."""
        ...

    def stream(self, source: JobSource, ctx: RunContext) -> Generator[EpisodeRecord]:
        """Run the chunks ``source`` hands out until it has none and none runs; yield each record
        as its chunk is done. A consumer that stops iterating abandons the chunks in flight."""
        ...

    def worker_count(self, ctx: RunContext) -> int:
        """How many chunks of ``per_worker = 1`` this backend runs at once for ``ctx``."""
        ...


class Worker:
    """A worker's oracle and per-cell env copies, built once and reused across chunks.

    ``oracle``: one the caller owns (and closes), instead of one built from ``ctx.oracle``.
    ``alone``: this worker is the run's only one (``workers = 1``): its policy worker, if it has
    one and steps more than one episode copy, may get a CPU of its own and answer one half of
    the copies while the rollout steps the other half (:func:`safecert.isolation.colocated`'s
    ``apart``, :func:`~safecert.blackbox.rollout.run_lockstep`'s ``post``). ``halves=False``:
    the run holds at most one episode of each cell, so there are no two halves to step in turn,
    and the policy worker stays on this thread's CPU (a round trip between two CPUs costs
    several times one on a CPU: 75–98 µs against 5–7 µs at worst, benchmarks/RESULTS_startup.md
    round 5)."""

    def __init__(
        self,
        ctx: RunContext,
        oracle: Oracle | None = None,
        *,
        alone: bool = False,
        halves: bool = True,
    ) -> None:
        self.ctx = ctx
        self.halves = halves
        self._owns_oracle = oracle is None
        self.oracle = make_oracle(ctx.oracle) if oracle is None else oracle
        self.calls = lockstep_calls(self.oracle)
        self.copies = episodes_per_worker(ctx, alone=alone)
        post = getattr(self.oracle, "post_calls", None)
        #: the policy worker's channel, and how a step's calls are posted to it, for a lone
        #: rollout with several copies (in halves; ahead while the worker has a CPU of its own)
        self.post: PostCalls | None = None
        self.apart: Channel | None = None
        if (
            alone
            and halves
            and post is not None
            and ctx.oracle.in_worker
            and lockstep(ctx, alone=True) >= 2
        ):
            self.post, self.apart = post, getattr(self.oracle, "channel", None)
        self.envs: dict[int, list] = {}
        self._colocation = ExitStack()
        #: pin this thread and its workers to one CPU only when there are workers to share it
        #: with (a policy or environment worker): a pinned process with nothing to meet cannot
        #: move off a busy CPU (in-process, ``exec:`` and HTTP runs with a registered environment)
        self.colocate = has_workers(ctx.config, ctx.oracle)

    def _envs(self, cell: int, jobs: int) -> list:
        """The cell's env copies for a chunk of ``jobs`` episodes: made as first needed, at most
        :func:`episodes_per_worker`."""
        envs = self.envs.setdefault(cell, [])
        if len(envs) < min(jobs, self.copies):
            from safecert.blackbox.rollout import build_cell_env

            ranges = self.ctx.obs_ranges
            envs.extend(
                build_cell_env(
                    self.ctx.config,
                    Path(self.ctx.base_dir),
                    self.ctx.cells[cell],
                    None if ranges is None else np.asarray(ranges, dtype=float),
                    self.oracle.act,
                )
                for _ in range(min(jobs, self.copies) - len(envs))
            )
        return envs[: max(1, min(jobs, self.copies))]

    def run(self, jobs: Sequence[EpisodeJob]) -> list[EpisodeRecord]:
        """Run ``jobs`` (grouped by cell) on this worker's env copies; with the policy and
        environment workers, when it has any, on this thread's CPU
        (:func:`safecert.isolation.colocated`)."""
        from safecert.blackbox.rollout import run_lockstep
        from safecert.isolation import colocated

        out: list[EpisodeRecord] = []
        with (
            colocated(self.apart) if self.colocate else nullcontext(),
            self._posting() as (post, ahead),
        ):
            for cell, group in groupby(jobs, key=lambda j: j.cell):
                cell_jobs = list(group)
                out.extend(
                    run_lockstep(
                        self._envs(cell, len(cell_jobs)),
                        cell_jobs,
                        self.oracle.act,
                        self.ctx.config,
                        calls=self.calls,
                        post=post,
                        ahead=ahead,
                    )
                )
        return out

    @contextmanager
    def _posting(self) -> Iterator[tuple[PostCalls | None, bool]]:
        """How this :meth:`run` sends a step's calls: ``(post, ahead)`` for
        :func:`~safecert.blackbox.rollout.run_lockstep` (``post`` None: whole steps), and
        afterwards, whether the next run still posts ahead.

        A lone run's policy worker (``post``) always gets the steps of two halves of the copies
        in turn, so its requests are the same whether they are posted ahead or not. Posting
        ahead pays only while the worker's own CPU is free: the run's time is then the
        rollout's plus the time it waited for replies, against the rollout's plus the worker's
        (and two context switches a step) when they take turns on one CPU. While it posts ahead
        the worker is told to poll for the next request after each reply
        (:data:`~safecert.blackbox.oracles.worker.POLL_ON`, sent once it has answered): the
        rollout's request then finds it awake instead of waking it on the other CPU. A run that
        waited longer for replies than the worker spent answering them (its CPU is busy with
        other work) tells it to stop polling and brings it back to the rollout's CPU for the
        rest of the run (:func:`safecert.isolation.rejoin`). Execution only: the records are
        the same."""
        from safecert.blackbox.oracles.worker import POLL_OFF, POLL_ON
        from safecert.isolation import ChannelFailure, cpu_seconds, has_own_cpu, rejoin

        apart, post = self.apart, self.post
        if post is not None and apart is not None and has_own_cpu(apart) and apart.pid is None:
            with suppress(ChannelFailure):  # not started yet (its first call says why not)
                apart.start()
        if post is None or apart is None or not has_own_cpu(apart) or apart.pid is None:
            yield post, False
            return
        pid, waited, told = apart.pid, [0.0], [False]

        def timed(observations: np.ndarray, size: int) -> Reply:
            reply = post(observations, size)

            def wait() -> np.ndarray | list[CallResult]:
                began = time.perf_counter()
                try:
                    return reply()
                finally:
                    waited[0] += time.perf_counter() - began
                    if not told[0] and apart.pid == pid:  # it has answered: it heeds the signal
                        told[0] = True
                        _signal(pid, POLL_ON)

            return wait

        before = cpu_seconds(pid)
        yield timed, True
        after = cpu_seconds(pid) if apart.pid == pid else None
        if before is None or after is None or waited[0] > after - before:
            _signal(pid, POLL_OFF)
            rejoin(apart)

    def stay_colocated(self) -> None:
        """Keep this thread and its workers on one CPU until :meth:`close` instead of claiming
        it for each :meth:`run`: the claim costs about a millisecond, as much as a cheap episode,
        and a sequential run hands out one batch at a time (measured: 1.8 ms per chunk of one
        episode; benchmarks/RESULTS_sequential_overshoot.md)."""
        from safecert.isolation import colocated

        if self.colocate:
            self._colocation.enter_context(colocated(self.apart))

    def close(self) -> None:
        for envs in self.envs.values():
            for env in envs:
                env.close()
        if self._owns_oracle:
            self.oracle.close()
        self._colocation.close()


_WORKER: Worker | None = None
ABORT_WAIT_S = 5.0


def _signal(pid: int, signum: int) -> None:
    """Send ``signum`` to the policy worker ``pid`` (a no-op when it has gone)."""
    with suppress(OSError):
        os.kill(pid, signum)


def _init_worker(ctx: RunContext, owner: int) -> None:
    """Pool-worker start-up: die with the process that owns the pool (``owner``) and with the
    forkserver, and close the worker (its vendors with it) when the process exits.

    ``multiprocessing`` ends workers with ``os._exit``, which skips :mod:`atexit`; its own exit
    hook runs :class:`multiprocessing.util.Finalize` callbacks, so the worker is closed there."""
    global _WORKER
    procs.die_with_parent()
    _WORKER = Worker(ctx)
    _WORKER.stay_colocated()
    mp_util.Finalize(None, _WORKER.close, exitpriority=10)
    signal.signal(signal.SIGTERM, _stop_worker)
    procs.exit_with(owner, _WORKER.close)


def _stop_worker(signum: int, frame: object) -> None:
    """SIGTERM from :meth:`LocalBackend.close` (an interrupted run): close the worker's vendors,
    then leave at once (the chunk in progress is abandoned; its records were never yielded)."""
    if _WORKER is not None:
        _WORKER.close()
    os._exit(128 + signum)


def _run_chunk(jobs: list[EpisodeJob]) -> list[EpisodeRecord]:
    assert _WORKER is not None
    return _WORKER.run(jobs)


def chunked(jobs: Sequence[EpisodeJob], size: int) -> list[list[EpisodeJob]]:
    """Consecutive chunks of at most ``size`` jobs, never mixing cells."""
    chunks: list[list[EpisodeJob]] = []
    for _, group in groupby(jobs, key=lambda j: j.cell):
        items = list(group)
        chunks.extend(items[i : i + size] for i in range(0, len(items), size))
    return chunks


class LocalBackend:
    """Process-pool backend on this machine.

    ``workers``: the number of processes; ``None`` takes the run config's ``workers`` when the
    first :meth:`run` sees it, else ``os.cpu_count()`` (so ``--workers`` overrides the config,
    which overrides the machine's core count).

    The pool (or, with ``workers = 1``, the in-process :class:`Worker`) is opened lazily on the
    first :meth:`run` and kept open across calls for the same :class:`RunContext` — a sequential
    run calls ``run`` once per round. Close it with :meth:`close` or use the backend as a context
    manager; ``certify`` closes a local backend when it finishes. A ``run`` that stops early
    (an error, or the caller stops iterating) shuts the pool down so no queued work lingers; the
    next call opens a fresh one. Outcomes depend only on the seeds, so records never depend on
    the pool's life.

    :meth:`run` chunks hold ``chunk_episodes`` episodes (default: 4 × :func:`episodes_per_worker`,
    at least 8) so
    that records reach the store — and the progress bar — steadily; two chunks per worker are kept
    in flight. :meth:`stream` runs the chunks its source hands out, ``source.per_worker`` per
    worker.
    """

    def __init__(self, workers: int | None = None, chunk_episodes: int | None = None) -> None:
        self.requested = workers
        self.workers = workers or os.cpu_count() or 1
        self.chunk_episodes = chunk_episodes
        self._ctx: RunContext | None = None
        self._worker: Worker | None = None
        self._pool: ProcessPoolExecutor | None = None
        self._lent: Oracle | None = None

    def lend(self, oracle: Oracle | None) -> None:
        """An oracle of the run's policy already started (the pre-run check's): with one worker,
        the in-process :class:`Worker` uses it instead of starting another. The caller closes
        it, after this backend, and takes it back with ``lend(None)``."""
        self._lent = oracle

    def __enter__(self) -> LocalBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self, ctx: RunContext, halves: bool) -> None:
        if self._ctx is not None and self._ctx == ctx:
            if self._worker is None or self._worker.halves == halves:
                return
        self.close()
        self.workers = self.worker_count(ctx)
        if self.workers == 1:
            self._worker = Worker(ctx, self._lent, alone=True, halves=halves)
            self._worker.stay_colocated()
        else:
            mp_ctx = mp.get_context("forkserver")
            mp_ctx.set_forkserver_preload(["safecert.blackbox.rollout", "safecert.envs"])
            # processes start on demand, so a run with fewer chunks than workers starts fewer
            self._pool = ProcessPoolExecutor(
                self.workers,
                mp_context=mp_ctx,
                initializer=_init_worker,
                initargs=(ctx, os.getpid()),
            )
        self._ctx = ctx

    def worker_count(self, ctx: RunContext) -> int:
        return self.requested or ctx.config.workers or os.cpu_count() or 1

    def run(self, jobs: Sequence[EpisodeJob], ctx: RunContext) -> Iterator[EpisodeRecord]:
        alone = self.worker_count(ctx) == 1
        size = self.chunk_episodes or max(8, 4 * episodes_per_worker(ctx, alone=alone))
        cells = [job.cell for job in jobs]
        return self._stream(ListSource(jobs, size), ctx, halves=len(set(cells)) < len(cells))

    def stream(self, source: JobSource, ctx: RunContext) -> Generator[EpisodeRecord]:
        return self._stream(source, ctx, halves=True)

    def _stream(
        self, source: JobSource, ctx: RunContext, *, halves: bool
    ) -> Generator[EpisodeRecord]:
        """:meth:`stream`; ``halves``: some cell may get two episodes (:class:`Worker`)."""
        chunk = source.take()
        if not chunk:
            return
        self._open(ctx, halves)
        finished = False
        try:
            if self._worker is not None:
                while chunk:
                    yield from self._worker.run(chunk)
                    chunk = source.take()
            else:
                yield from self._run_pool(source, chunk)
            finished = True
        finally:
            if not finished:
                self.close(abort=True)

    def _run_pool(self, source: JobSource, first: list[EpisodeJob]) -> Iterator[EpisodeRecord]:
        assert self._pool is not None
        pool = self._pool
        slots = source.per_worker * self.workers
        pending: set[Future] = set()
        chunk = first
        while True:
            while chunk:  # a chunk is taken only when a slot is free
                pending.add(pool.submit(_run_chunk, chunk))
                chunk = source.take() if len(pending) < slots else []
            if not pending:
                return
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                yield from fut.result()
            chunk = source.take()

    def close(self, *, abort: bool = False) -> None:
        """Close the in-process worker or shut the pool down (idempotent).

        ``abort`` (a run that stopped early: an error, Ctrl-C, a consumer that stopped iterating)
        does not wait for the chunks in progress: each worker gets ``SIGTERM``, closes its
        vendors and exits; one that has not exited after :data:`ABORT_WAIT_S` is killed."""
        worker, pool = self._worker, self._pool
        self._worker, self._pool, self._ctx = None, None, None
        if worker is not None:
            worker.close()
        if pool is not None:
            procs.shutdown_pool(pool, abort=abort, wait_s=ABORT_WAIT_S)
