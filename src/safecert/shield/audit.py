"""What a guard session records of each decision: the :class:`Decision` itself, the JSON Lines files
it goes to (audit log, steps log) and, when the ``opentelemetry`` API is installed, one span.

The audit log and the span carry the same facts; the steps log is in exactly the format
``safecert shield certify/synthesize --logs`` reads.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

OnBlock = Literal["ask_again", "halt"]
ON_BLOCK: tuple[OnBlock, ...] = ("ask_again", "halt")
BLOCKED_PREFIX = "blocked by shield"


class JsonlSink:
    """An append-only JSON Lines file shared by sessions: one short lock around each write."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = self.path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, record: Mapping[str, Any]) -> None:
        line = json.dumps(record, sort_keys=True, default=str) + "\n"
        with self._lock:
            self._fh.write(line)
            self._fh.flush()

    def close(self) -> None:
        with self._lock:
            self._fh.close()


@dataclass(frozen=True)
class Decision:
    """The guard's verdict on one proposed call.

    ``action``/``state`` are ``None`` when they could not be determined (then the call is
    blocked); ``permitted`` is D(state) (empty once the session ended); ``ends_session`` says the
    session is over after this decision (halt, a refusal limit, the ``halt`` policy)."""

    allowed: bool
    tool: str
    action: str | None
    state: str | None
    permitted: tuple[str, ...]
    reason: str = ""
    ends_session: bool = False
    arguments: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def is_halt(self) -> bool:
        return self.allowed and self.ends_session

    def message(self) -> str:
        """What a blocked call returns to the agent: begins ``blocked by shield``."""
        return (
            f"{BLOCKED_PREFIX}: {self.reason}; permitted actions: "
            f"{', '.join(self.permitted) if self.permitted else 'none (session ended)'}"
        )


_TRACER: list[Any] = []  # [tracer or None], resolved on first use


def trace_decision(d: Decision, session_id: str, steps: int) -> None:
    """One OpenTelemetry span per decision (``safecert.shield.decision``) when the
    ``opentelemetry`` API is installed; the active tracer provider decides where it goes (the
    API's default provider drops it). Nothing else depends on it."""
    if not _TRACER:
        try:
            from opentelemetry import trace
        except ImportError:
            _TRACER.append(None)
        else:
            _TRACER.append(trace.get_tracer("safecert.shield"))
    tracer = _TRACER[0]
    if tracer is None:
        return
    span = tracer.start_span("safecert.shield.decision")
    if span.is_recording():  # the API's no-op default is not: no attributes built for it
        attributes = {
            "safecert.session": session_id,
            "safecert.tool": d.tool,
            "safecert.allowed": d.allowed,
            "safecert.ends_session": d.ends_session,
            "safecert.executed_calls": steps,
        }
        for key, value in (("state", d.state), ("action", d.action), ("reason", d.reason)):
            if value is not None:
                attributes[f"safecert.{key}"] = value
        span.set_attributes(attributes)
    # ended at once, never made current: a decision has no children, and attaching a context
    # would cost every call
    span.end()
