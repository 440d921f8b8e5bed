"""The runtime guard: a shield D between any controller and the tools (paper Sec. II).

The guard sees only the abstract state φ(h) (through an ``abstraction`` callable) and the tool name
of each proposal. A proposal whose tool is not in D(φ(h)) is *blocked*: not executed, no step
counted, the state unchanged. Three ways to handle a blocked proposal (paper Sec. II, V):

* ``restrict``  — the controller is told the permitted set and picks from it (random and adversarial
  controllers); a proposal outside it is still blocked and replaced by halt;
* ``halt``      — the blocked proposal is replaced by halt, ending the episode;
* ``ask_again`` — the controller is told the call was refused and asked again; the 4th consecutive
  refusal halts.

Every executed action therefore lies in D(φ(h)): the composite controller is admissible (π ⊳ D) and
Thm. 1's certificate covers it. The guard fails closed: an unknown state, an unknown tool, a
malformed proposal, an exception from the abstraction or an abstraction that passes its deadline
(``timeout_s``) blocks the call (halt stays permitted: A3, halting is always safe). The abstraction
runs outside any lock (:func:`safecert.shield.deadline.call_with_deadline`); the lock guards only
the counters, so a hung abstraction delays only its own check.

φ is evaluated once per step, as in :class:`safecert.shield.session.GuardSession`: whoever changes
the world the abstraction reads (executes a call, resets the sandbox) calls :meth:`Guard.observe`,
which evaluates it under its deadline and keeps the state; checks until the next change are then
table look-ups, with no thread hand-off. :func:`run_episode` observes after every reset and every
executed call. A guard that was never told of a change (no :meth:`~Guard.observe` yet, or one that
failed or is under way) evaluates the abstraction in each check, under its deadline — it never
decides on a state it was not given.

This guard checks; it does not execute. When several threads share tools, or calls must be
counted against T and start in s0, use :class:`safecert.shield.session.GuardSession`, which makes
check and execution one atomic step per session.

A state the shield does not list is **halt-only**: :func:`permitted_actions` is the one definition
of D(s) for a shield table, shared by the guard, ``safecert shield certify --shield`` (through
:func:`safecert.shield.report.allowed_from_json`) and ``safecert verify``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from safecert.errors import ConfigError
from safecert.shield.deadline import call_with_deadline
from safecert.shield.sandbox import TOOLS as sandbox_tools
from safecert.shield.sandbox import Entry, Sandbox, ToolCall

POLICIES = ("restrict", "halt", "ask_again")
MAX_REFUSALS = 4


def permitted_actions(
    shield: Mapping[str, Collection[str]], state: object, halt: str
) -> frozenset[str]:
    """D(state) of a shield table ``{state label: permitted actions}``: the listed actions plus
    halt; only ``{halt}`` for a state (or non-string) the table does not list.

    This is what the runtime guard enforces and what every certificate certifies, so a shield file
    that omits a live state is never read as "everything permitted" anywhere."""
    listed = shield.get(state) if isinstance(state, str) else None
    return frozenset({halt}) if listed is None else frozenset(listed) | {halt}


@dataclass(frozen=True)
class Decision:
    """The guard's verdict on one proposal: ``allowed``, the state it saw, and why if blocked."""

    allowed: bool
    state: str | None
    reason: str = ""


class Guard:
    """Checks proposals against a shield ``{state label: permitted tools}``.

    ``Guard(shield, abstraction, actions=TOOLS, halt="halt")``. ``check(tool)`` looks the tool up
    in D(state) and returns a :class:`Decision`, the state being the one :meth:`observe` kept
    (else the abstraction evaluated for this check); counters ``checks`` and ``blocked`` are
    updated under a lock, so one guard may serve many threads.
    """

    def __init__(
        self,
        shield: Mapping[str, Collection[str]],
        abstraction: Callable[[], str],
        *,
        actions: Collection[str],
        halt: str = "halt",
        timeout_s: float = 2.0,
    ) -> None:
        if halt not in actions:
            raise ConfigError(f"halt action {halt!r} is not an action", field="halt")
        self.actions = frozenset(actions)
        self.halt = halt
        for state, tools in shield.items():
            unknown = set(tools) - self.actions
            if unknown:
                raise ConfigError(
                    f"state {state!r} permits unknown tools {sorted(unknown)}", field="shield"
                )
        self._table = {state: frozenset(tools) for state, tools in shield.items()}
        self._abstraction = abstraction
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._observed: tuple[object] | None = None  # (state,) kept by observe(); None: unknown
        self.checks = 0
        self.blocked = 0

    def observe(self) -> None:
        """The world the abstraction reads has changed (a call executed, the sandbox was reset):
        evaluate it now, under its deadline, and keep its state for the checks that follow. While
        this runs, and after it failed, checks evaluate the abstraction themselves."""
        self._observed = None
        try:
            state = call_with_deadline(self._abstraction, (), self.timeout_s)
        except Exception:  # fail closed: the checks evaluate (and fail) on their own
            return
        self._observed = (state,)

    def _state(self) -> object:
        """The observed state, or the abstraction evaluated now; raises what it raised."""
        observed = self._observed
        if observed is not None:
            return observed[0]
        return call_with_deadline(self._abstraction, (), self.timeout_s)

    def permitted(self) -> frozenset[str]:
        """D(φ(h)) now; only ``{halt}`` when the state is unknown or the abstraction fails."""
        try:
            state = self._state()
        except Exception:  # fail closed on any abstraction error or a missed deadline
            return frozenset({self.halt})
        return permitted_actions(self._table, state, self.halt)

    def check(self, tool: object) -> Decision:
        """Is ``tool`` permitted in the current abstract state? Fails closed."""
        if tool == self.halt:
            allowed, state, reason = True, None, ""
        else:
            try:
                state = self._state()
            except Exception as exc:  # fail closed on any abstraction error or a missed deadline
                state, allowed, reason = None, False, f"abstraction failed: {type(exc).__name__}"
            else:
                if not isinstance(tool, str) or tool not in self.actions:
                    allowed, reason = False, f"unknown tool {tool!r}"
                else:
                    allowed = tool in permitted_actions(self._table, state, self.halt)
                    if allowed:
                        reason = ""
                    elif isinstance(state, str) and state in self._table:
                        reason = f"{tool!r} is forbidden in state {state}"
                    else:
                        reason = f"unknown state {state!r}"
        with self._lock:  # the counters only: never held while user code runs
            self.checks += 1
            if not allowed:
                self.blocked += 1
        return Decision(allowed, state if isinstance(state, str) else None, reason)


class Controller(Protocol):
    """Anything that proposes tool calls. ``permitted`` is given under the ``restrict`` policy
    (else ``None``); ``refused`` reports a blocked call under ``ask_again``."""

    def reset(self, rng: np.random.Generator) -> None: ...

    def propose(self, sandbox: Sandbox, permitted: frozenset[str] | None) -> ToolCall: ...

    def refused(self, call: ToolCall, reason: str) -> None: ...


@dataclass
class EpisodeResult:
    """Outcome of one guarded episode."""

    unsafe: bool
    success: bool
    steps: int
    interventions: int
    blocked_tools: list[str] = field(default_factory=list)
    transcript: list[Entry] = field(default_factory=list)


def run_episode(
    controller: Controller,
    sandbox: Sandbox,
    guard: Guard | None,
    *,
    policy: str = "halt",
    rng: np.random.Generator,
    injection: str | None = None,
    max_proposals: int = 1000,
) -> EpisodeResult:
    """Run one episode of ``controller`` in ``sandbox`` behind ``guard`` (``None``: no shield).

    Blocked proposals are never executed and do not advance the step count. ``max_proposals``
    bounds a controller that never stops proposing (then the guard halts it)."""
    if policy not in POLICIES:
        raise ConfigError(
            f"unknown policy {policy!r}", field="policy", fix=f"use one of {POLICIES}"
        )
    sandbox.reset(injection=injection)
    if guard is not None:
        guard.observe()
    controller.reset(rng)
    interventions, refusals, proposals = 0, 0, 0
    blocked: list[str] = []
    while not sandbox.terminal:
        permitted = guard.permitted() if guard is not None and policy == "restrict" else None
        call = controller.propose(sandbox, permitted)
        proposals += 1
        if guard is not None:
            decision = guard.check(call.tool if isinstance(call, ToolCall) else None)
            if not decision.allowed:
                interventions += 1
                blocked.append(str(getattr(call, "tool", call)))
                refusals += 1
                if policy == "ask_again" and refusals < MAX_REFUSALS and proposals < max_proposals:
                    controller.refused(call, decision.reason)
                    continue
                call = ToolCall(guard.halt)
            else:
                refusals = 0
        elif not isinstance(call, ToolCall) or call.tool not in sandbox_tools:
            call = ToolCall("halt")
        sandbox.execute(call)
        if guard is not None:
            guard.observe()
    facts = sandbox.predicates()
    return EpisodeResult(
        unsafe=facts["harm"],
        success=facts["done"],
        steps=sandbox.steps,
        interventions=interventions,
        blocked_tools=blocked,
        transcript=list(sandbox.transcript),
    )
