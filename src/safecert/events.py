"""Progress events of a run: one stream that every view of a run's progress reads.

An engine emits events (``events.emit("episodes_stored", done=…, total=…)``); listeners turn them
into a Rich bar on a terminal, into a progress line every ~10 s when stderr is not a terminal
(:class:`ProgressLines`), or into JSON lines in a file (:class:`JsonLines`, ``--events FILE``).
Each event is a flat dictionary: ``time`` (Unix seconds), ``kind`` and the kind's fields; the
kinds and their fields are listed in ``docs/blackbox.md`` ("Progress events") and ``docs/bnn.md``.

Events describe progress only: nothing in a certificate depends on them, and a listener that
fails is a bug in the listener (it raises), never a changed result.

>>> seen = []
>>> events = Events(seen.append)
>>> events.emit("run_started", cells=4)
>>> seen[0]["kind"], seen[0]["cells"]
('run_started', 4)
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from safecert.errors import ConfigError

Event = dict[str, Any]
Listener = Callable[[Event], None]

#: seconds between two progress lines when stderr is not a terminal
PROGRESS_INTERVAL_S = 10.0
#: environment variable overriding :data:`PROGRESS_INTERVAL_S` (tests use a short one)
INTERVAL_ENV = "SAFECERT_PROGRESS_INTERVAL"


class Events:
    """A fan-out of progress events to listeners, called in order, in the emitting thread."""

    def __init__(self, *listeners: Listener) -> None:
        self.listeners: list[Listener] = list(listeners)

    def subscribe(self, listener: Listener) -> None:
        self.listeners.append(listener)

    def emit(self, kind: str, **fields: Any) -> None:
        event: Event = {"time": round(time.time(), 3), "kind": kind, **fields}
        for listener in self.listeners:
            listener(event)

    def close(self) -> None:
        """Close every listener that holds something open (a file, a live bar)."""
        for listener in self.listeners:
            close = getattr(listener, "close", None)
            if close is not None:
                close()


@contextmanager
def owned(events: Events | None, make: Callable[[], Events]) -> Iterator[Events]:
    """``events`` as given (its owner closes it), else ``make()``, closed on leaving."""
    if events is not None:
        yield events
        return
    made = make()
    try:
        yield made
    finally:
        made.close()


class JsonLines:
    """Write each event as one JSON line to ``path`` (truncated first), flushed at once so that a
    reader following the file sees every event as it happens."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.file: IO[str] | None = self.path.open("w", encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                f"cannot write {self.path} ({exc.strerror or exc})",
                field="events",
                fix="pass a writable file path",
            ) from None

    def __call__(self, event: Event) -> None:
        if self.file is None:
            return
        self.file.write(json.dumps(event, sort_keys=True, default=str) + "\n")
        self.file.flush()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


def progress_interval() -> float:
    """:data:`PROGRESS_INTERVAL_S`, or the seconds in ``$SAFECERT_PROGRESS_INTERVAL``."""
    text = os.environ.get(INTERVAL_ENV)
    if not text:
        return PROGRESS_INTERVAL_S
    try:
        value = float(text)
    except ValueError:
        return PROGRESS_INTERVAL_S
    return value if math.isfinite(value) and value >= 0 else PROGRESS_INTERVAL_S


class ProgressLines:
    """Plain progress lines for a log (stderr that is not a terminal): at most one every
    ``interval_s`` seconds — done/total, cells decided and an ETA for a black-box run; the current
    ε and CEGIS iteration for a BNN run — plus one line when a run starts and when it finishes.
    Lines, never a redrawn bar, so a CI log stays readable."""

    def __init__(
        self,
        stream: IO[str] | None = None,
        interval_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream
        self.interval_s = progress_interval() if interval_s is None else interval_s
        self.clock = clock
        self.last = -math.inf
        self.started = clock()
        self.first_done = 0
        self.epsilon: str | None = None

    def _write(self, text: str) -> None:
        stream = self.stream if self.stream is not None else sys.stderr
        stream.write(f"safecert: {text}\n")
        stream.flush()

    def __call__(self, event: Event) -> None:
        kind = event["kind"]
        now = self.clock()
        if kind == "run_started":
            self.started, self.last = now, now
            self.first_done = int(event.get("episodes_stored") or 0)
            self._write(_started_text(event))
            return
        if kind == "run_finished":
            self._write(f"finished: verdict {event.get('verdict')}")
            return
        if kind == "epsilon_started":
            self.epsilon = str(event.get("epsilon"))
        if kind == "epsilon_finished":
            self._write(
                f"ε = {event.get('epsilon')}: {event.get('verdict')} ({event.get('reason')})"
            )
            self.last = now
            return
        if kind not in ("episodes_stored", "cegis_iteration") or now - self.last < self.interval_s:
            return
        self.last = now
        if kind == "cegis_iteration":
            self._write(
                f"ε = {self.epsilon}: CEGIS iteration {event.get('iteration')}: {event.get('text')}"
            )
            return
        done, total = int(event["done"]), int(event["total"])
        self._write(
            f"{done}/{total} episodes, {event.get('cells_decided')}/{event.get('cells')} cells "
            f"decided, {event.get('failures')} failures, ETA {self._eta(done, total, now)}"
        )

    def _eta(self, done: int, total: int, now: float) -> str:
        ran = done - self.first_done
        elapsed = now - self.started
        if ran <= 0 or elapsed <= 0:
            return "unknown"
        seconds = max(0, total - done) * elapsed / ran
        return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def _started_text(event: Event) -> str:
    if event.get("engine") == "bnn":
        return f"started: BNN, ε ladder {', '.join(map(str, event.get('epsilons', [])))}"
    return (
        f"started: {event.get('engine')} run, {event.get('cells')} cells, up to "
        f"{event.get('episodes_total')} episodes ({event.get('episodes_stored')} already stored)"
    )
