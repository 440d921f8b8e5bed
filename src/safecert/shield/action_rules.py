"""A declarative action map: a TOML rules file (tool + argument conditions → model action), so most
deployments write no Python for it (``safecert shield serve --action-map rules.toml``).

Rules are data evaluated by our own code, in time linear in the rules and the arguments, and they
neither block nor mutate what they read: :class:`safecert.shield.abstraction.Abstraction` therefore
evaluates an :class:`ActionRules` in the calling thread, without the deadline hand-off (and the
argument copy) that an operator's Python action map needs. An exception still fails closed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class CannotDecide(TypeError):
    """A condition met an argument of another kind than it was written for: ``gt ge lt le`` an
    argument that is not a number, ``eq ne in`` one that is not of its value's kind (number,
    string or boolean). A tool may well read ``"5000"`` as 5000, or ``true`` as 1, so the rule
    cannot decide either way: the call is blocked (fail closed) rather than matched or passed on
    to the next rule."""


def _kind(v: Any) -> str:
    """The JSON kind a condition compares within: ``number`` (int or float, not bool),
    ``string``, ``boolean``; anything else (null, array, object) is ``other``."""
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int | float):
        return "number"
    return "string" if isinstance(v, str) else "other"


def _number(v: Any) -> int | float:
    if _kind(v) != "number":
        raise CannotDecide(f"{v!r} is not a number")
    return v


def _same_kind(v: Any, kind: str) -> Any:
    if _kind(v) != kind:
        raise CannotDecide(f"{v!r} is not a {kind}")
    return v


_RULE_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "eq": lambda v, x: _same_kind(v, _kind(x)) == x,
    "ne": lambda v, x: _same_kind(v, _kind(x)) != x,
    "gt": lambda v, x: _number(v) > x,
    "ge": lambda v, x: _number(v) >= x,
    "lt": lambda v, x: _number(v) < x,
    "le": lambda v, x: _number(v) <= x,
    "in": lambda v, x: _same_kind(v, _kind(x[0])) in x,
}


def _value_error(op: str, value: Any) -> str | None:
    """Why ``value`` cannot stand on the right of ``op`` in a rules file, or None when it can."""
    if op in ("gt", "ge", "lt", "le"):
        if _kind(value) != "number" or value != value:
            return f"{op} needs a number (not NaN), got {value!r}"
    elif op in ("eq", "ne"):
        if _kind(value) == "other":
            return f"{op} needs a number, a string or a boolean, got {value!r}"
    elif (
        not isinstance(value, list)
        or not value
        or _kind(value[0]) == "other"
        or any(_kind(x) != _kind(value[0]) for x in value)
    ):
        return f"in needs a non-empty list of numbers, of strings or of booleans, got {value!r}"
    return None


@dataclass(frozen=True)
class ActionRules:
    """A parsed rules file: ``(tool, [(argument, operator, value)], action)`` in file order. Called
    as ``rules(tool, arguments) -> action``: the first rule whose tool matches and whose conditions
    all hold (an absent argument fails a condition); the tool's own name when none does. A
    condition on an argument of another kind than its value raises :class:`CannotDecide`."""

    rules: tuple[tuple[str, tuple[tuple[str, str, Any], ...], str], ...]

    def __call__(self, tool: str, arguments: dict[str, Any]) -> str:
        for rule_tool, conds, action in self.rules:
            if rule_tool == tool and all(
                arg in arguments and _holds(arg, op, arguments[arg], value)
                for arg, op, value in conds
            ):
                return action
        return tool


def _holds(arg: str, op: str, v: Any, x: Any) -> bool:
    try:
        return _RULE_OPS[op](v, x)
    except CannotDecide as exc:
        raise CannotDecide(f"argument {arg!r}: {exc}; {op} cannot compare it") from None


def load_action_rules(path: Path) -> ActionRules:
    """An action map from a TOML rules file, so most deployments write no Python for it::

        [[rule]]
        tool = "pay"
        when = { amount = { gt = 1000 } }   # every condition must hold (absent argument: no)
        action = "pay_large"

        [[rule]]
        tool = "pay"
        action = "pay_small"

    The first rule whose ``tool`` matches and whose ``when`` conditions all hold gives the action
    (operators ``eq ne gt ge lt le in``); a call no rule matches maps to its tool's name, which the
    guard blocks unless the model has that action. A condition compares within one JSON kind:
    ``gt ge lt le`` take a number, ``eq ne`` a number, a string or a boolean, ``in`` a non-empty
    list of one of those kinds. An argument that is there but of another kind (``"5000"`` or
    ``true`` against a number) raises :class:`CannotDecide` and the call is blocked, because a
    tool may well read the string as the number the rule was written for. Raises
    :class:`ConfigError` naming the rule for a malformed file, including a value of the wrong
    kind for its operator."""
    from safecert.config import read_toml
    from safecert.errors import ConfigError

    try:  # the shared reader: a regular file, size- and shape-limited, before tomllib sees it
        doc = read_toml(path)
    except ConfigError as exc:
        raise ConfigError(f"cannot read {path} ({exc})", field="--action-map") from None
    rules = doc.get("rule")
    if not isinstance(rules, list) or not rules or set(doc) != {"rule"}:
        raise ConfigError(f"{path}: expected [[rule]] tables only", field="--action-map")
    parsed: list[tuple[str, tuple[tuple[str, str, Any], ...], str]] = []
    for i, rule in enumerate(rules, 1):
        where = f"{path}: rule {i}"
        if not isinstance(rule, dict) or set(rule) - {"tool", "when", "action"}:
            raise ConfigError(f"{where}: keys are tool, when, action", field="--action-map")
        tool, action, when = rule.get("tool"), rule.get("action"), rule.get("when", {})
        if not isinstance(tool, str) or not isinstance(action, str) or not isinstance(when, dict):
            raise ConfigError(
                f"{where}: tool and action must be strings, when a table", field="--action-map"
            )
        conds = []
        for arg, test in when.items():
            if not isinstance(test, dict) or not test or set(test) - set(_RULE_OPS):
                raise ConfigError(
                    f"{where}: condition on {arg!r} must use {sorted(_RULE_OPS)}",
                    field="--action-map",
                )
            for op, value in test.items():
                if (bad := _value_error(op, value)) is not None:
                    raise ConfigError(f"{where}: {arg!r}: {bad}", field="--action-map")
                conds.append((arg, op, value))
        parsed.append((tool, tuple(conds), action))
    return ActionRules(tuple(parsed))
