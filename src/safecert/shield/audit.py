"""What a guard session records of each decision: the :class:`Decision` itself, the JSON Lines files
it goes to (audit log, steps log) and, when the ``opentelemetry`` API is installed, one span.

The audit log and the span carry the same facts; the steps log is in exactly the format
``safecert shield certify/synthesize --logs`` reads.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

OnBlock = Literal["ask_again", "halt"]
ON_BLOCK: tuple[OnBlock, ...] = ("ask_again", "halt")
BLOCKED_PREFIX = "blocked by shield"
_set_attribute = object.__setattr__  # past a frozen dataclass's own __setattr__


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


@dataclass(frozen=True, init=False)
class Decision:
    """The guard's verdict on one proposed call.

    ``action``/``state`` are ``None`` when they could not be determined (then the call is
    blocked); ``permitted`` is D(state) (empty once the session ended); ``ends_session`` says the
    session is over after this decision (halt, a refusal limit, the ``halt`` policy);
    ``arguments`` is the session's own copy of the call's arguments (not compared).

    Immutable as any frozen dataclass (assigning or deleting a field raises
    :class:`dataclasses.FrozenInstanceError`; equality, hash, repr, :func:`dataclasses.replace`
    and :func:`dataclasses.asdict` as generated). Only the constructor is written out: it sets
    the instance's ``__dict__`` in one assignment, where the generated one of a frozen dataclass
    pays an ``object.__setattr__`` per field — every guard check builds one (13.5k against 6.3k
    instructions; ``benchmarks/RESULTS_guard.md``)."""

    allowed: bool
    tool: str
    action: str | None
    state: str | None
    permitted: tuple[str, ...]
    reason: str = ""
    ends_session: bool = False
    arguments: dict[str, Any] = field(default_factory=dict, compare=False)

    def __init__(
        self,
        allowed: bool,
        tool: str,
        action: str | None,
        state: str | None,
        permitted: tuple[str, ...],
        reason: str = "",
        ends_session: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> None:
        _set_attribute(
            self,
            "__dict__",
            {
                "allowed": allowed,
                "tool": tool,
                "action": action,
                "state": state,
                "permitted": permitted,
                "reason": reason,
                "ends_session": ends_session,
                "arguments": {} if arguments is None else arguments,
            },
        )

    @property
    def is_halt(self) -> bool:
        return self.allowed and self.ends_session

    def message(self) -> str:
        """What a blocked call returns to the agent: begins ``blocked by shield``."""
        return (
            f"{BLOCKED_PREFIX}: {self.reason}; permitted actions: "
            f"{', '.join(self.permitted) if self.permitted else 'none (session ended)'}"
        )


#: while the tracer provider is the API's default, how long a decision goes untraced before the
#: provider is looked up again (a session's start looks it up at once: :func:`look_up_tracer`)
TRACER_RECHECK_S = 1.0
_tracer: Any = None  # the tracer spans go to; None: no span (no provider set, or no API)
_look_again_at = -math.inf  # time.monotonic() after which a decision looks the provider up again


def look_up_tracer() -> None:
    """Resolve where decision spans go (:func:`trace_decision`): nowhere without the
    ``opentelemetry`` API or while its tracer provider is still the API's default (a proxy whose
    spans the API drops); else to that provider's tracer, for good — the API lets a process set
    its provider once (``trace.set_tracer_provider``, or ``OTEL_PYTHON_TRACER_PROVIDER`` read on
    the first look-up). Only public API: ``trace.get_tracer_provider()`` and its
    ``ProxyTracerProvider`` default. A look-up costs more than a decision's other bookkeeping
    (``os.environ`` is read), so it is made at each session's start and then at most once every
    :data:`TRACER_RECHECK_S` seconds while no provider is set."""
    global _tracer, _look_again_at
    try:
        from opentelemetry import trace
    except ImportError:
        _tracer, _look_again_at = None, math.inf
        return
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        _tracer, _look_again_at = None, time.monotonic() + TRACER_RECHECK_S
    else:
        _tracer, _look_again_at = trace.get_tracer("safecert.shield"), math.inf


def trace_decision(d: Decision, session_id: str, steps: int) -> None:
    """One OpenTelemetry span per decision (``safecert.shield.decision``), with the audit line's
    facts, when a tracer provider is set (:func:`look_up_tracer`). A provider set while a session
    runs is honoured from its first decision at most :data:`TRACER_RECHECK_S` seconds later, one
    set before a session starts from the session's first decision. Without one a decision pays a
    clock read, and no span is started. Nothing else depends on it."""
    tracer = _tracer
    if tracer is None:
        if time.monotonic() < _look_again_at:
            return
        look_up_tracer()
        tracer = _tracer
        if tracer is None:
            return
    span = tracer.start_span("safecert.shield.decision")
    if span.is_recording():  # a provider may sample a span out: no attributes built for it
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
