"""A Rich progress bar for a run, on stderr: overall ETA plus live failures per cell.

Disabled (a no-op) when ``enabled`` is False — the CLI passes ``stderr.isatty() and not --json``.
At most :data:`MAX_CELL_ROWS` cells get their own row; larger grids show the overall bar and the
worst cells so far in its description.
"""

from __future__ import annotations

from collections.abc import Sequence

from safecert.blackbox.backends import RunContext
from safecert.blackbox.grid import cell_label
from safecert.blackbox.jobs import EpisodeJob, EpisodeRecord
from safecert.blackbox.judge import failure_flags
from safecert.blackbox.store import EpisodeStore

MAX_CELL_ROWS = 12


class RunProgress:
    def __init__(
        self, ctx: RunContext, jobs: Sequence[EpisodeJob], store: EpisodeStore, *, enabled: bool
    ) -> None:
        self.enabled = enabled and bool(jobs)
        self.budget = ctx.config.spec.budget
        self.cells = ctx.cells
        if not self.enabled:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        per_cell: dict[int, int] = {}
        for job in jobs:
            per_cell[job.cell] = per_cell.get(job.cell, 0) + 1
        self.failures = {c: 0 for c in per_cell}
        for record in store.records():
            if record.cell in self.failures:
                self.failures[record.cell] += int(failure_flags([record], self.budget)[2][0])
        self.total = self.progress.add_task("episodes", total=len(jobs))
        self.rows = {}
        if len(per_cell) <= MAX_CELL_ROWS:
            for cell, n in per_cell.items():
                self.rows[cell] = self.progress.add_task(self._label(cell), total=n)

    def _label(self, cell: int) -> str:
        return f"  {cell_label(self.cells[cell])[:40]:<40} failures {self.failures[cell]}"

    def advance(self, record: EpisodeRecord) -> None:
        if not self.enabled:
            return
        self.failures[record.cell] += int(failure_flags([record], self.budget)[2][0])
        self.progress.advance(self.total)
        if record.cell in self.rows:
            self.progress.update(
                self.rows[record.cell], advance=1, description=self._label(record.cell)
            )
        else:
            worst = sorted(self.failures.items(), key=lambda kv: -kv[1])[:3]
            self.progress.update(
                self.total,
                description="episodes · most failures: " + ", ".join(f"#{c}={k}" for c, k in worst),
            )

    def __enter__(self) -> RunProgress:
        if self.enabled:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self.progress.stop()
