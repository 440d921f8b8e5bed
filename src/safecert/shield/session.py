"""One guarded agent session: the certified shield enforced call by call (paper Sec. II, Thm. 1).

Thm. 1 certifies the composite controller π ⊳ D: every *executed* call lies in D(φ(h)) for the
history h it executed after, the episode starts in s0 and lasts at most T executed calls. A
:class:`GuardSession` makes exactly that true for one session of any agent (an MCP client through
:mod:`safecert.shield.gateway`, plain Python tools through :mod:`safecert.shield.adapters`):

* **atomic**: the check and the execution are one step — :meth:`GuardSession.call` holds the
  session's own lock from the check until the executed call is recorded, so a call is executed in
  exactly the state it was checked in (the gateway holds an equivalent per-session async lock);
* **s0**: the session's state starts at ``φ([])``, which must be the model's initial state, else
  every call is blocked with the reason;
* **horizon**: after T executed calls every call but halt is blocked;
* **fail closed**: ``φ`` and the action map run in their own thread with a deadline
  (``timeout_s``); an exception, a timeout, an unknown state or action blocks the call. A hung ``φ``
  holds only its own session's lock, and only until its deadline — no lock shared between sessions
  is ever held while ``φ``, the action map or a tool runs;
* **refusals**: under ``ask_again`` the 4th consecutive refusal ends the session (halt); under
  ``halt`` the first does.

Every decision goes to the audit log; every executed call goes to the steps log in exactly the
format ``safecert shield certify/synthesize --logs`` reads (episode = session), so deployment logs
re-certify the shield they ran under.

``history`` (what ``φ`` receives) is the list of executed calls, each
``{"tool", "arguments", "result", "action"}`` (copies taken when the call executed; φ must treat
them as read-only); ``φ`` returns a state label or a dict of predicate values, as in the logs.

A call's arguments are held by three parties, each of which may change what it holds: the
caller (what the tool is given; the tool may rewrite it), a Python action map (user code on a
worker: it may rewrite its arguments, keep them, or still run after its deadline) and the
session's record (the :class:`Decision`'s ``arguments``, the history φ reads). Each gets an
object no other party can reach, so a check with a Python map takes two copies
(:func:`json_copy`): the record's in :meth:`GuardSession.decide`, the map's in
:meth:`Abstraction.action`. With one copy two of them would share an object: the map could
rewrite what is forwarded, or the record. A rules file's map (our own code, which never rewrites
what it reads) reads the record's copy in the calling thread.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from safecert.shield.abstraction import (
    Abstraction,
    AbstractionFailed,
    decode_result,
    json_copy,
    why,
)
from safecert.shield.audit import (
    BLOCKED_PREFIX,
    ON_BLOCK,
    Decision,
    JsonlSink,
    OnBlock,
    look_up_tracer,
    trace_decision,
)
from safecert.shield.certified import CertifiedShield
from safecert.shield.guard import MAX_REFUSALS, permitted_actions


@dataclass
class GuardSession:
    """The shield enforced on one session (module docstring). Thin and stateful: the history, the
    current state, the executed-call count and the refusal streak.

    :meth:`call` (threads) and :meth:`acall` (async) are the atomic entry points;
    :meth:`decide` and :meth:`commit` are their two halves, to be called only under the session's
    lock. A session is used either from threads or from one event loop, not both at once."""

    shield: CertifiedShield
    abstraction: Abstraction
    on_block: OnBlock = "ask_again"
    steps_log: JsonlSink | None = None
    audit_log: JsonlSink | None = None
    session_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    history: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _alock: asyncio.Lock | None = field(default=None, repr=False)
    _state: int | None = None
    _ended: str | None = None
    _refusals: int = 0
    _permitted: dict[int, tuple[str, ...]] = field(default_factory=dict, repr=False)
    halt: str = field(init=False)  # the model's halt action (always permitted, never executed)
    horizon: int = field(init=False)  # T, the certified number of executed calls

    def __post_init__(self) -> None:
        self.halt = self.shield.halt  # both read once: a property read costs a check ~0.1 µs
        self.horizon = self.shield.horizon
        look_up_tracer()  # a tracer provider set before the session is honoured from its start

    @property
    def steps(self) -> int:
        """Executed calls so far (halt not counted)."""
        return len(self.history)

    @property
    def ended(self) -> str | None:
        """Why the session ended, or ``None`` while it runs."""
        return self._ended

    def call(
        self,
        tool: str,
        arguments: dict[str, Any],
        execute: Callable[[], Any],
        *,
        available: bool = True,
    ) -> Any:
        """Check ``tool(arguments)`` and, if permitted, run ``execute()`` and record it — all under
        this session's lock. Returns ``execute()``'s value, or the blocking :class:`Decision`.
        An exception from ``execute`` counts as an executed call (its text is the result) and is
        re-raised. ``available=False`` (no such tool) blocks the call like a forbidden one."""
        with self.lock:
            decision = self.decide(tool, arguments, available=available)
            if not decision.allowed or decision.is_halt:
                return decision
            try:
                result = execute()
            except Exception as exc:
                self.commit(decision, f"error: {why(exc)}")
                raise
            self.commit(decision, decode_result(result))
            return result

    async def acall(
        self,
        tool: str,
        arguments: dict[str, Any],
        execute: Callable[[], Awaitable[Any]],
        *,
        result_value: Callable[[Any], Any] = decode_result,
        available: bool = True,
        answer: Callable[[Any], Awaitable[None]] | None = None,
    ) -> Any:
        """:meth:`call` for async tools (the MCP gateway, the OpenAI Agents SDK adapter): the
        session's async lock is held from the decision until the call is recorded; ``φ`` and the
        action map run in worker threads, so the event loop and every other session go on.
        ``result_value`` turns the tool's return value into what φ sees. If ``execute`` raises
        (``TimeoutError``: its own deadline passed), whether it executed is unknown: the session
        ends and the exception is re-raised. ``answer``, when given, is awaited with
        the tool's value as soon as it returned, before φ of the new history is evaluated: the
        caller can pass the result on while the lock is still held, so no decision of this
        session is made before the new state is known (the value is returned as well)."""
        if self._alock is None:  # asyncio's: uncontended, taken without a trip round the loop
            self._alock = asyncio.Lock()  # (a fifth of anyio's fast-acquire lock's cost)
        async with self._alock:
            s0, action = await self._aprepare(tool, arguments, available)
            decision = self.decide(tool, arguments, available=available, s0=s0, action=action)
            if not decision.allowed or decision.is_halt:
                return decision
            try:
                result = await execute()
            except BaseException as exc:
                cause = "timed out" if isinstance(exc, TimeoutError) else why(exc)
                self.end(f"{tool!r} failed ({cause}); the state after it is unknown")
                raise
            if answer is not None:
                try:
                    await answer(result)
                except BaseException as exc:  # cancelled: φ cannot be awaited now
                    self.end(f"{tool!r} executed, its answer not passed on ({why(exc)})")
                    raise
            entry = self._entry(decision, result_value(result))  # (answer left it as it was)
            try:
                after: int | AbstractionFailed = await self.abstraction.astate(
                    [*self.history, entry]
                )
            except AbstractionFailed as failed:
                after = failed
            self._record(decision, entry, after)
            return result

    async def _aprepare(
        self, tool: str, arguments: dict[str, Any], available: bool
    ) -> tuple[int | AbstractionFailed | None, str | AbstractionFailed | None]:
        """φ([]) and the action map's answer that :meth:`decide` will need, awaited on the event
        loop (``None``: not needed). Only the user code runs on a worker; the decision itself is
        a table look-up made on the loop."""
        s0: int | AbstractionFailed | None = None
        if self._ended is not None or tool == self.halt:
            return None, None
        if self._state is None:
            try:
                s0 = await self.abstraction.astate([])
            except AbstractionFailed as exc:
                return exc, None
            if s0 != self.shield.model.initial:
                return s0, None
        if len(self.history) >= self.horizon or not available:
            return s0, None
        try:
            return s0, await self.abstraction.aaction(tool, arguments)
        except AbstractionFailed as exc:
            return s0, exc

    # -- the two halves ------------------------------------------------------------------------

    def decide(
        self,
        tool: str,
        arguments: dict[str, Any],
        *,
        available: bool = True,
        s0: int | AbstractionFailed | None = None,
        action: str | AbstractionFailed | None = None,
    ) -> Decision:
        """The decision on one proposed call; the caller holds the session lock. A permitted halt
        ends the session here (it is never executed by a tool); a tool that does not exist
        (``available=False``) is blocked. ``s0`` and ``action``, when given, are φ([]) and the
        action map's answer already computed (or how they failed); else they are computed here."""
        decision = self._decide(tool, json_copy(arguments), available, s0, action)
        if not decision.allowed and not decision.ends_session and self._ended is None:
            self._refusals += 1
            if self.on_block == "halt" or self._refusals >= MAX_REFUSALS:
                why = "the halt policy" if self.on_block == "halt" else f"{MAX_REFUSALS} refusals"
                decision = replace(
                    decision, reason=f"{decision.reason}; session halted after {why}",
                    ends_session=True,
                )  # fmt: skip
        if decision.ends_session:
            self._end(decision.reason or "halt")
        self._audit(decision)
        return decision

    def commit(self, decision: Decision, result: Any) -> None:
        """Record the executed call of a permitted ``decision`` and move to φ of the new history;
        the caller holds the session lock. If φ fails now the session ends (the next state is
        unknown, so nothing more may run) and the step is not logged (it has no next_state)."""
        entry = self._entry(decision, result)
        try:
            after: int | AbstractionFailed = self.abstraction.state([*self.history, entry])
        except AbstractionFailed as exc:
            after = exc
        self._record(decision, entry, after)

    def _entry(self, decision: Decision, result: Any) -> dict[str, Any]:
        assert decision.allowed and decision.action is not None and self._state is not None
        return {
            "tool": decision.tool,
            "arguments": decision.arguments,  # a deep copy taken at decision time
            "result": json_copy(result),
            "action": decision.action,
        }

    def _record(
        self, decision: Decision, entry: dict[str, Any], after: int | AbstractionFailed
    ) -> None:
        """Append the executed call and move to ``after`` = φ of the new history (or end the
        session when φ failed)."""
        assert self._state is not None
        before = self._state
        self.history.append(entry)
        self._refusals = 0
        if isinstance(after, AbstractionFailed):
            self._state = None  # unknown: no halt line either (it would invent a transition)
            self._end(f"{after} after an executed call; step {self.steps - 1} not logged")
            self._audit_event("ended", str(after))
            return
        self._state = after
        if self.steps_log is not None:
            model = self.shield.model
            self.steps_log.write(
                {
                    "episode": self.session_id,
                    "t": self.steps - 1,
                    "state": model.state_repr(before),
                    "action": decision.action,
                    "next_state": model.state_repr(after),
                }
            )

    def end(self, reason: str) -> None:
        """End the session from outside because its state is unknown (e.g. the upstream failed
        mid-call); every later call is blocked and no halt step is logged."""
        self._state = None
        self._end(reason)
        self._audit_event("ended", reason)

    # -- internals -----------------------------------------------------------------------------

    def _decide(
        self,
        tool: str,
        arguments: dict[str, Any],
        available: bool,
        s0_known: int | AbstractionFailed | None = None,
        action_known: str | AbstractionFailed | None = None,
    ) -> Decision:
        model = self.shield.model
        if self._ended is not None:
            reason = f"session ended ({self._ended})"
            return Decision(False, tool, None, self._label(), (), reason, False, arguments)
        if tool == self.halt:
            return Decision(True, tool, self.halt, self._label(), (), "halt", True, arguments)
        if self._state is None:
            try:
                s0 = _known(s0_known) if s0_known is not None else self.abstraction.state([])
            except AbstractionFailed as exc:
                return Decision(False, tool, None, None, (self.halt,), str(exc), False, arguments)
            if s0 != model.initial:
                reason = (
                    f"the session starts in {model.labels[s0]}, not the certified initial state "
                    f"{model.labels[model.initial]}"
                )
                s0_label = model.labels[s0]
                return Decision(False, tool, None, s0_label, (self.halt,), reason, True, arguments)
            self._state = s0
        state = model.labels[self._state]
        permitted = self._permitted.get(self._state)
        if permitted is None:  # D(state), computed once per state of this session
            permitted = tuple(sorted(permitted_actions(self.shield.table, state, self.halt)))
            self._permitted[self._state] = permitted
        if len(self.history) >= self.horizon:
            reason = f"the certified horizon T = {self.horizon} executed calls is reached"
            return Decision(False, tool, None, state, (self.halt,), reason, False, arguments)
        if not available:
            reason = f"no tool named {tool!r}"
            return Decision(False, tool, None, state, permitted, reason, False, arguments)
        try:
            action = (
                _known(action_known)
                if action_known is not None
                else self.abstraction.action(tool, arguments)
            )
        except AbstractionFailed as exc:
            return Decision(False, tool, None, state, permitted, str(exc), False, arguments)
        if action == self.halt:
            return Decision(True, tool, action, state, (), "halt", True, arguments)
        if action not in permitted:
            reason = f"{action!r} (tool {tool!r}) is forbidden in state {state}"
            return Decision(False, tool, action, state, permitted, reason, False, arguments)
        return Decision(True, tool, action, state, permitted, "", False, arguments)

    def _label(self) -> str | None:
        return None if self._state is None else self.shield.model.labels[self._state]

    def _end(self, reason: str) -> None:
        if self._ended is not None:
            return
        self._ended = reason
        if self.steps_log is not None and self._state is not None:
            model = self.shield.model
            if not model.unsafe[self._state]:
                self.steps_log.write(
                    {
                        "episode": self.session_id,
                        "t": self.steps,
                        "state": model.state_repr(self._state),
                        "action": self.halt,
                    }
                )

    def _audit(self, d: Decision) -> None:
        steps = len(self.history)
        trace_decision(d, self.session_id, steps)
        if self.audit_log is not None:
            self.audit_log.write(
                {
                    "time": time.time(),
                    "session": self.session_id,
                    "state": d.state,
                    "tool": d.tool,
                    "action": d.action,
                    "allowed": d.allowed,
                    "reason": d.reason,
                    "ends_session": d.ends_session,
                    "executed_calls": steps,
                }
            )

    def _audit_event(self, event: str, reason: str) -> None:
        if self.audit_log is not None:
            self.audit_log.write(
                {"time": time.time(), "session": self.session_id, "event": event, "reason": reason}
            )


def _known(value: Any) -> Any:
    """A value computed ahead, or the :class:`AbstractionFailed` it failed with, raised."""
    if isinstance(value, AbstractionFailed):
        raise value
    return value


__all__ = [
    "BLOCKED_PREFIX",
    "ON_BLOCK",
    "Abstraction",
    "AbstractionFailed",
    "Decision",
    "GuardSession",
    "JsonlSink",
    "OnBlock",
    "decode_result",
]
