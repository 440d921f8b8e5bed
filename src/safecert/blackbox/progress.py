"""A black-box run's progress as events (:mod:`safecert.events`), and the views that read them.

:class:`RunTracker` turns what the engine does (records stored, cells decided) into events:
``run_started``, ``episodes_stored`` (after each batch committed to the store), ``cell_decided``
and ``run_finished``. :class:`ProgressBar` draws them as a Rich bar on stderr (overall ETA plus
live failures per cell; at most :data:`MAX_CELL_ROWS` cells get their own row, larger grids show
the worst cells so far in the overall description); :class:`safecert.events.ProgressLines` writes
them as lines for a log, and :class:`safecert.events.JsonLines` to ``--events FILE``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from safecert.blackbox.grid import cell_label
from safecert.blackbox.jobs import EpisodeRecord
from safecert.blackbox.judge import failure_flags
from safecert.blackbox.store import EpisodeStore
from safecert.events import Event, Events, owned

MAX_CELL_ROWS = 12

#: what an engine accepts as ``progress``: a bar on stderr or not (None: when it is a terminal),
#: or the events of a caller (the CLI: bar, lines and ``--events FILE`` as it chose)
Progress = bool | Events | None


@contextmanager
def run_events(progress: Progress) -> Iterator[Events]:
    """The events a run emits into: the caller's, or new ones with a :class:`ProgressBar` when
    ``progress`` is True (None: when stderr is a terminal), closed when the run ends."""
    if isinstance(progress, Events):
        with owned(progress, Events) as events:
            yield events
        return
    wanted = sys.stderr.isatty() if progress is None else progress
    with owned(None, lambda: Events(ProgressBar()) if wanted else Events()) as events:
        yield events


class RunTracker:
    """Counts of one run (episodes stored, failures, cells decided) and the events they make.

    ``targets``: the episodes each cell runs at most (fixed-N: N; sequential: the cap), so
    ``total`` is the most the run will store. ``judge(cell)``: the fields of a ``cell_decided``
    event for a cell whose planned episodes are all stored (fixed-N), or None where the engine
    announces decisions itself (sequential: :meth:`decided`)."""

    def __init__(
        self,
        events: Events,
        *,
        engine: str,
        cells: Sequence[dict[str, Any]],
        targets: Sequence[int],
        store: EpisodeStore,
        budget: float,
        judge: Callable[[int], dict[str, Any]] | None = None,
    ) -> None:
        self.events = events
        self.engine = engine
        self.cells = cells
        self.targets = list(targets)
        self.budget = budget
        self.judge = judge
        self.stored = [0] * len(cells)
        self.failures = [0] * len(cells)
        for record in store.records():
            self.stored[record.cell] += 1
            self.failures[record.cell] += int(failure_flags([record], budget)[2][0])
        self.decisions: dict[int, str] = {}

    @property
    def done(self) -> int:
        return sum(self.stored)

    @property
    def total(self) -> int:
        return sum(self.targets)

    def start(self) -> None:
        self.events.emit(
            "run_started",
            engine=self.engine,
            cells=len(self.cells),
            cell_params=[dict(c) for c in self.cells],
            episodes_per_cell=max(self.targets, default=0),
            episodes_total=self.total,
            episodes_stored=self.done,
        )
        if self.judge is not None:  # resumed cells already complete
            for cell, n in enumerate(self.stored):
                if n >= self.targets[cell]:
                    self.decided(cell, **self.judge(cell))

    def add(self, records: Sequence[EpisodeRecord]) -> None:
        """A batch of ``records`` was committed to the store."""
        if not records:
            return
        touched: set[int] = set()
        flags = failure_flags(records, self.budget)[2]
        for record, failed in zip(records, flags, strict=True):
            self.stored[record.cell] += 1
            self.failures[record.cell] += int(failed)
            touched.add(record.cell)
        self.events.emit(
            "episodes_stored",
            batch=len(records),
            done=self.done,
            total=self.total,
            failures=sum(self.failures),
            cells=len(self.cells),
            cells_decided=len(self.decisions),
            touched=[[c, self.stored[c], self.failures[c]] for c in sorted(touched)],
        )
        if self.judge is not None:
            for cell in sorted(touched):
                if self.stored[cell] >= self.targets[cell]:
                    self.decided(cell, **self.judge(cell))

    def decided(self, cell: int, **fields: Any) -> None:
        """Announce ``cell``'s decision once (``decision``, ``episodes``, ``failures``,
        ``upper_bound``, …)."""
        if cell in self.decisions:
            return
        self.decisions[cell] = str(fields.get("decision"))
        self.events.emit(
            "cell_decided",
            cell=cell,
            params=dict(self.cells[cell]),
            label=cell_label(self.cells[cell]),
            cells_decided=len(self.decisions),
            cells=len(self.cells),
            **fields,
        )

    def finish(self, verdict: str) -> None:
        self.events.emit(
            "run_finished",
            engine=self.engine,
            verdict=verdict,
            done=self.done,
            cells=len(self.cells),
            cells_decided=len(self.decisions),
            decisions={str(c): d for c, d in sorted(self.decisions.items())},
        )


class ProgressBar:
    """A Rich bar on stderr drawn from a run's events (a listener of :class:`RunTracker`)."""

    def __init__(self) -> None:
        self.progress: Any = None
        self.rows: dict[int, Any] = {}
        self.labels: list[str] = []
        self.failures: dict[int, int] = {}

    def __call__(self, event: Event) -> None:
        kind = event["kind"]
        if kind == "run_started":
            self._start(event)
        elif kind == "episodes_stored" and self.progress is not None:
            self.progress.update(self.total, completed=event["done"], total=event["total"])
            for cell, n, k in event["touched"]:
                self.failures[cell] = k
                if cell in self.rows:
                    self.progress.update(
                        self.rows[cell], completed=n, description=self._label(cell)
                    )
            if not self.rows:
                worst = sorted(self.failures.items(), key=lambda kv: -kv[1])[:3]
                self.progress.update(
                    self.total,
                    description="episodes · most failures: "
                    + ", ".join(f"#{c}={k}" for c, k in worst),
                )
        elif kind == "cell_decided" and event["cell"] in self.rows and self.progress is not None:
            cell = event["cell"]
            self.progress.update(
                self.rows[cell], description=f"{self._label(cell)} {event.get('decision')}"
            )
        elif kind == "run_finished":
            self.close()

    def _start(self, event: Event) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        self.close()
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        params = event["cell_params"]
        self.labels = [cell_label(p) for p in params]
        per_cell = event["episodes_per_cell"]
        self.total = self.progress.add_task(
            "episodes", total=event["episodes_total"], completed=event["episodes_stored"]
        )
        if len(params) <= MAX_CELL_ROWS:
            for cell in range(len(params)):
                self.failures[cell] = 0
                self.rows[cell] = self.progress.add_task(self._label(cell), total=per_cell)
        self.progress.start()

    def _label(self, cell: int) -> str:
        return f"  {self.labels[cell][:40]:<40} failures {self.failures.get(cell, 0)}"

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
            self.rows = {}
