"""The abstraction of a deployment: φ (history → model state) and the action map (tool call →
model action), bound to a shield model and each run under a deadline (paper Sec. II).

:class:`Abstraction` is the one code path that turns what an agent did into model labels — for the
gateway, the adapters and ``safecert shield ingest``. It fails closed: an exception, a missed
deadline or an answer outside the model raises :class:`AbstractionFailed` with the reason, and the
caller blocks the call. :func:`load_callable` and :func:`check_timeout` validate the operator's
``MODULE:FUNC`` and deadline options.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safecert.errors import SafecertError
from safecert.shield.action_rules import ActionRules
from safecert.shield.deadline import acall_with_deadline, call_with_deadline
from safecert.shield.model import ShieldModel


def decode_result(value: Any) -> Any:
    """A tool result as φ sees it: JSON when the text is JSON, else the text itself."""
    if isinstance(value, list):  # content parts
        value = "".join(p.get("text", "") for p in value if isinstance(p, dict))
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


#: the immutable JSON leaves, shared by a copy (exact types: a subclass goes the longer way)
_LEAVES = frozenset({str, int, float, bool, type(None)})


def json_copy(value: Any) -> Any:
    """A deep copy of JSON-like data (dicts, lists, tuples, strings, numbers, booleans, None) —
    what a guard session keeps of a call's arguments and result — made without
    :func:`copy.deepcopy`'s generic machinery; anything else goes through it. Leaves are shared
    (immutable). A container of leaves only (the usual arguments: ``{"invoice": "INV-001"}``) is
    copied by the C constructor once its values' types are checked (a tuple of leaves is
    immutable all through and is shared); any other container is copied with its leaves tested in
    line, without a call per leaf (``benchmarks/RESULTS_guard.md``). The copy shares no mutable
    object with ``value``: a change to one is never seen in the other."""
    kind = type(value)
    if kind in _LEAVES:
        return value
    if kind is dict:
        if _LEAVES.issuperset(map(type, value.values())):
            return dict(value)
        return {k: v if type(v) in _LEAVES else json_copy(v) for k, v in value.items()}
    if kind is list:
        if _LEAVES.issuperset(map(type, value)):
            return list(value)
        return [v if type(v) in _LEAVES else json_copy(v) for v in value]
    if kind is tuple:
        if _LEAVES.issuperset(map(type, value)):
            return value
        return tuple([v if type(v) in _LEAVES else json_copy(v) for v in value])
    if isinstance(value, str | int | float | bool):  # subclasses of the leaves: shared as well
        return value
    return copy.deepcopy(value)


def why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


@dataclass(frozen=True)
class Abstraction:
    """φ and the action map of a deployment, bound to a model, each run under a deadline.

    ``phi(history) -> state`` (a label or a dict of predicate values); ``action_map(tool,
    arguments) -> action`` (default: the tool's name; an :class:`ActionRules` from a rules file is
    our own bounded code and runs in the calling thread, without a deadline). :meth:`state` and :meth:`action` return model
    labels or raise :class:`AbstractionFailed` with the reason — the same code path for the
    gateway, the adapters and ``safecert shield ingest``."""

    model: ShieldModel
    phi: Callable[[list[dict[str, Any]]], object]
    action_map: Callable[[str, dict[str, Any]], object] | None = None
    timeout_s: float = 2.0

    def state(self, history: list[dict[str, Any]]) -> int:
        """Index of φ(history) in the model."""
        try:
            value = call_with_deadline(self.phi, (list(history),), self.timeout_s)
        except Exception as exc:
            raise AbstractionFailed(f"abstraction failed ({why(exc)})") from None
        return self._state_index(value)

    async def astate(self, history: list[dict[str, Any]]) -> int:
        """:meth:`state` awaited on an asyncio loop (no thread blocked while φ runs)."""
        try:
            value = await acall_with_deadline(self.phi, (list(history),), self.timeout_s)
        except Exception as exc:
            raise AbstractionFailed(f"abstraction failed ({why(exc)})") from None
        return self._state_index(value)

    async def aaction(self, tool: str, arguments: dict[str, Any]) -> str:
        """:meth:`action` awaited on an asyncio loop."""
        if self.action_map is None or isinstance(self.action_map, ActionRules):
            return self._action_here(tool, arguments)
        try:
            value = await acall_with_deadline(
                self.action_map, (tool, json_copy(arguments)), self.timeout_s
            )
        except Exception as exc:
            raise AbstractionFailed(f"action map failed ({why(exc)})") from None
        return self._action_name(tool, value)

    def _state_index(self, value: object) -> int:
        try:
            return self.model.state_index(value, field="abstraction")
        except SafecertError as exc:
            raise AbstractionFailed(
                f"abstraction returned a state outside the model ({exc})"
            ) from None

    def action(self, tool: str, arguments: dict[str, Any]) -> str:
        """The model action of a tool call."""
        if self.action_map is None or isinstance(self.action_map, ActionRules):
            return self._action_here(tool, arguments)
        try:
            value = call_with_deadline(
                self.action_map, (tool, json_copy(arguments)), self.timeout_s
            )
        except Exception as exc:
            raise AbstractionFailed(f"action map failed ({why(exc)})") from None
        return self._action_name(tool, value)

    def _action_here(self, tool: str, arguments: dict[str, Any]) -> str:
        """The action without user code, in this thread: the tool's name, or a rules file's answer
        (:class:`ActionRules`: bounded, non-mutating; an exception still fails closed)."""
        if self.action_map is None:
            return self._action_name(tool, tool)
        try:
            value = self.action_map(tool, arguments)
        except Exception as exc:
            raise AbstractionFailed(f"action map failed ({why(exc)})") from None
        return self._action_name(tool, value)

    def _action_name(self, tool: str, value: object) -> str:
        if not isinstance(value, str) or value not in self.model.actions:
            raise AbstractionFailed(f"unknown action {value!r} for tool {tool!r}")
        return value


class AbstractionFailed(Exception):
    """φ or the action map failed, timed out or answered outside the model (the call is blocked)."""


def load_callable(spec: str, option: str) -> Callable[..., Any]:
    """``MODULE:FUNC`` resolved from the working directory (or PYTHONPATH); one-line error. The
    gateway's abstraction and action map are the operator's own code and run in its process."""
    from safecert.errors import ConfigError
    from safecert.usercode import import_from

    fn = import_from(spec, Path.cwd(), field=option)
    if not callable(fn):
        raise ConfigError(f"{spec!r} is not callable", field=option)
    return fn


def check_timeout(timeout_s: float, option: str = "--timeout") -> float:
    """A deadline in seconds: finite, in (0, 3600]."""
    from safecert.errors import ConfigError

    if not 0 < timeout_s <= 3600:  # also rejects nan and inf
        raise ConfigError(f"must be in (0, 3600] seconds, got {timeout_s}", field=option)
    return timeout_s
