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


class NotANumber(TypeError):
    """An ordered comparison (``gt ge lt le``) met an argument that is not a number."""


def _number(v: Any) -> int | float:
    """``v`` when it is a number (not a bool); else :class:`NotANumber`. A tool's own schema may
    read ``"5000"`` as 5000, so a rule cannot take a string for "not above 1000": it cannot
    decide, and the call is blocked (fail closed)."""
    if isinstance(v, int | float) and not isinstance(v, bool):
        return v
    raise NotANumber(f"{v!r} is not a number")


_RULE_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "eq": lambda v, x: v == x,
    "ne": lambda v, x: v != x,
    "gt": lambda v, x: _number(v) > x,
    "ge": lambda v, x: _number(v) >= x,
    "lt": lambda v, x: _number(v) < x,
    "le": lambda v, x: _number(v) <= x,
    "in": lambda v, x: v in x,
}


@dataclass(frozen=True)
class ActionRules:
    """A parsed rules file: ``(tool, [(argument, operator, value)], action)`` in file order. Called
    as ``rules(tool, arguments) -> action``: the first rule whose tool matches and whose conditions
    all hold (an absent argument fails a condition); the tool's own name when none does. An
    ordered comparison of an argument that is not a number raises :class:`NotANumber`."""

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
    except NotANumber as exc:
        raise NotANumber(f"argument {arg!r}: {exc}; {op} needs a number") from None


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
    guard blocks unless the model has that action. ``gt ge lt le`` on an argument that is there
    but is not a number (``"5000"``, ``true``) raise: the call is blocked, because a tool may well
    read the string as the number the rule was written for. Raises
    :class:`ConfigError` naming the rule for a malformed file."""
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
            conds += [(arg, op, value) for op, value in test.items()]
        parsed.append((tool, tuple(conds), action))
    return ActionRules(tuple(parsed))
