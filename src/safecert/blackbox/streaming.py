"""The scheduler of ``certify --sequential``: a decision on each completed episode, and work handed
out so that at most the episodes in flight run past a decision.

:class:`CellStreams` is the :class:`~safecert.blackbox.backends.JobSource` a backend streams.

**Decision order: episode index, never completion order.** A cell's rule reads the outcomes of
its *prefix*: the consecutive completed indices 0, 1, …, f−1 (f, the frontier). A record that
completes out of order (index > f) waits in memory until the frontier reaches it. The rule is
checked every time the frontier moves, and the first n at which it stops
(:func:`~safecert.stats.sequential.stopping_index`) is the cell's decision point τ. τ is a
function of the episodes' outcomes alone — each outcome is a function of its seed — and not of
worker timing, batch size, backend or completion order, so the evidence (exactly episodes
0 … τ−1 of each cell, what :meth:`CellStreams.arrived` hands over for storing) and the
certificate built from it are the same bytes however the run was executed, and ``verify``
re-derives τ from the stored outcomes. Deciding in completion order instead would make τ — and
the certificate — depend on which worker was faster.

**Overshoot.** A cell receives chunks of at most ``batch_size`` consecutive indices (a worker's
episodes at once: the run config's ``batch_size`` × ``lockstep``,
:func:`~safecert.blackbox.backends.episodes_per_worker`), only while it is undecided, and only
below f + ``window`` (window = workers × that, the backend's in-flight capacity with one chunk per
worker). Every index handed out before the decision is
< f + window ≤ τ − 1 + window, so at most window − 1 episodes of a cell start after its decision
point, however slow one worker is (a straggler at the frontier holds the window, not the other
workers' results). Those episodes — the overshoot — are not evidence: their records are dropped
and only their number is kept, a run statistic (it depends on timing when workers > 1) that goes
to the ``cell_decided`` event and the store's ``sequential_overshoot`` meta, never into the
certificate. The window also bounds the records waiting in memory.

**Order of cells.** The stage-1 (nominal) cell runs alone until it has decided, then every other
undecided cell; each chunk goes to the undecided cell with the fewest episodes handed out.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass, field

import numpy as np

from safecert.blackbox.backends import Backend, RunContext
from safecert.blackbox.jobs import EpisodeJob, EpisodeRecord, episode_seed
from safecert.blackbox.judge import failure_flags
from safecert.stats.betting import BettingRule
from safecert.stats.sequential import Boundaries, SequentialDecision, stopping_index

Rule = Boundaries | BettingRule


@dataclass
class CellStream:
    """One cell's progress: its prefix outcomes, the records completed beyond the frontier, what
    was handed out, and (once decided) the decision point and the overshoot."""

    cell: int
    outcomes: list[int] = field(default_factory=list)
    waiting: dict[int, EpisodeRecord] = field(default_factory=dict)
    issued: list[int] = field(default_factory=list)
    next_index: int = 0
    stopped_at: int | None = None
    overshoot: int = 0

    @property
    def frontier(self) -> int:
        return len(self.outcomes)


#: called once per cell when it decides: (cell, the rule's decision, overshoot)
OnDecided = Callable[[int, SequentialDecision, int], None]


class CellStreams:
    """The sequential run's job source (module docstring).

    ``stored``: each cell's records already in the store (a resumed run), ``stage1``: the cell that
    runs alone first, ``batch_size``: the episodes of one chunk (one worker's at once), ``window``:
    workers × batch_size of the backend that runs it."""

    per_worker = 1

    def __init__(
        self,
        rule: Rule,
        *,
        seed: int,
        budget: float,
        stage1: int,
        stored: Sequence[Sequence[EpisodeRecord]],
        batch_size: int,
        window: int,
        on_decided: OnDecided,
    ) -> None:
        self.rule = rule
        self.seed = seed
        self.budget = budget
        self.stage1 = stage1
        self.batch_size = batch_size
        self.window = max(window, batch_size)
        self.on_decided = on_decided
        self.cells = [CellStream(c) for c in range(len(stored))]
        for stream, records in zip(self.cells, stored, strict=True):
            for record in records:
                stream.waiting[record.index] = record
            self._advance(stream)
            stream.next_index = stream.frontier

    @property
    def finished(self) -> bool:
        return all(s.stopped_at is not None for s in self.cells)

    def _open_cells(self) -> list[CellStream]:
        first = self.cells[self.stage1]
        if first.stopped_at is None:
            return [first]
        return [s for s in self.cells if s.stopped_at is None]

    def take(self) -> list[EpisodeJob]:
        """Up to ``batch_size`` consecutive indices of one undecided cell, inside its window."""
        while True:
            best: tuple[int, int, int] | None = None
            for s in self._open_cells():
                end = min(self.rule.cap, s.frontier + self.window, s.next_index + self.batch_size)
                if s.next_index < end and (best is None or len(s.issued) < best[0]):
                    best = (len(s.issued), s.cell, end)
            if best is None:
                return []
            s = self.cells[best[1]]
            jobs = [
                EpisodeJob(s.cell, i, episode_seed(self.seed, s.cell, i))
                for i in range(s.next_index, best[2])
                if i not in s.waiting  # held by a resumed run's store
            ]
            s.issued.extend(j.index for j in jobs)
            s.next_index = best[2]
            if jobs:
                return jobs

    def arrived(self, record: EpisodeRecord) -> list[EpisodeRecord]:
        """Take a completed record; returns the records to store (they extend the cell's prefix,
        in index order, up to its decision point). A record past a decision point is dropped."""
        s = self.cells[record.cell]
        if s.stopped_at is not None or record.index < s.frontier:
            return []
        s.waiting[record.index] = record
        return self._advance(s)

    def _advance(self, s: CellStream) -> list[EpisodeRecord]:
        start = s.frontier
        moved: list[EpisodeRecord] = []
        while s.frontier in s.waiting:
            moved.append(s.waiting.pop(s.frontier))
            s.outcomes.append(int(failure_flags(moved[-1:], self.budget)[2][0]))
        if not moved:
            return []
        tau = stopping_index(self.rule, np.asarray(s.outcomes, dtype=np.int64))
        if tau is None:
            return moved
        s.stopped_at = tau
        del s.outcomes[tau:]
        s.waiting.clear()
        s.overshoot = len(s.issued) - bisect.bisect_left(s.issued, tau)
        self.on_decided(s.cell, self.rule.decide(np.asarray(s.outcomes)), s.overshoot)
        return moved[: tau - start]

    def records(self, backend: Backend, ctx: RunContext) -> Iterator[EpisodeRecord]:
        """Stream this source on ``backend``; yield the records to store. Once every cell has
        decided, the chunks still in flight (overshoot only) are abandoned."""
        if self.finished:
            return
        with closing(backend.stream(self, ctx)) as stream:
            for record in stream:
                yield from self.arrived(record)
                if self.finished:
                    return
