"""What a step costs and whether an episode reached its goal: ``spec.cost`` and ``spec.goal``.

Both are expressions of :mod:`safecert.expressions`:

- ``spec.cost`` is evaluated after every step on the step's scope: ``obs`` (the *true*
  observation the step returned, before any observation perturbation), ``action`` (the policy's
  action after the ``action_out_of_space`` rule, before actuation noise and delay), ``reward``,
  ``info``, ``terminated``, ``truncated`` and ``t`` (the step's index, from 0). Its value is one
  finite number (``true``/``false`` count 1/0); the episode's cost is the sum.
- ``spec.goal`` is evaluated once, at the episode's last step, on that step's scope plus the
  episode aggregates ``episode_return``, ``episode_cost`` and ``steps``; it is true or false.

Shorthands, kept from the first config format: cost ``info:KEY`` is ``info["KEY"]``; goal
``no_termination`` is ``not terminated``, ``info:KEY`` is ``info["KEY"]`` and ``return>=X`` is
``episode_return >= X``.

No silent zero: ``info["KEY"]`` on a step whose ``info`` lacks KEY, or ``obs[i]`` outside the
observation, is an :class:`~safecert.expressions.EvalError`. Before a run the first episode is
played once (:mod:`safecert.blackbox.preflight`), so a key the environment never
provides is one ConfigError naming it and the keys it does provide; later, a step without the key
ends its episode as a failure of kind ``spec`` (conservative). An explicit default
(``info.get("cost", 0)``) is the user's statement that a missing key means 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from safecert.expressions import EvalError, Expression, as_number, parse

STEP_NAMES = ("obs", "action", "reward", "info", "terminated", "truncated", "t")
EPISODE_NAMES = (*STEP_NAMES[:-1], "episode_return", "episode_cost", "steps")  # no t: use steps
RETURN_GOAL = re.compile(r"return\s*>=\s*([-+0-9.eE]+)")


def cost_expression(text: str) -> str:
    """The full expression a ``spec.cost`` string stands for (shorthands expanded)."""
    if text.startswith("info:"):
        return _info_key(text[5:], "spec.cost")
    return text


def goal_expression(text: str) -> str:
    """The full expression a ``spec.goal`` string stands for (shorthands expanded)."""
    if text == "no_termination":
        return "not terminated"
    if text.startswith("info:"):
        return _info_key(text[5:], "spec.goal")
    match = RETURN_GOAL.fullmatch(text)
    if match:
        return f"episode_return >= {match.group(1)}"
    return text


def _info_key(key: str, field: str) -> str:
    from safecert.errors import ConfigError

    if not key:
        raise ConfigError("'info:' names no key", field=field, fix='e.g. "info:cost"')
    if '"' in key and "'" in key:
        raise ConfigError(f"key {key!r} holds both quote characters", field=field)
    quoted = f'"{key}"' if '"' not in key else f"'{key}'"  # strings hold no escapes
    return f"info[{quoted}]"


def step_scope(
    obs: Any, action: Any, reward: float, info: dict, terminated: bool, truncated: bool, t: int
) -> dict[str, Any]:
    """The names ``spec.cost`` reads (:mod:`safecert.blackbox.spec`)."""
    return {
        "obs": obs,
        "action": action,
        "reward": float(reward),
        "info": info,
        "terminated": bool(terminated),
        "truncated": bool(truncated),
        "t": t,
    }


@dataclass(frozen=True)
class EpisodeSpec:
    """The compiled cost and goal of a run."""

    cost: Expression
    goal: Expression
    _what: str = field(init=False, repr=False, compare=False)
    #: ``(KEY, default)`` when the step's cost is one read of ``info``, else None
    #: (:func:`info_read`): the rollout reads it inline
    info_read: tuple[str, float | None] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_what", f"spec.cost {self.cost.text!r}")
        object.__setattr__(self, "info_read", info_read(self.cost))

    def step_cost(self, scope: dict[str, Any]) -> float:
        """The cost of one step, ``as_number(self.cost.evaluate(scope))``; :class:`EvalError`
        when it cannot be computed (overflow, an invalid operation, division by zero, a missing
        key or index)."""
        return as_number(self.cost.evaluate(scope), self._what)

    def reached(self, scope: dict[str, Any]) -> bool:
        """Whether the episode reached its goal; :class:`EvalError` when it cannot be decided."""
        value = self.goal.evaluate(scope)
        return as_number(value, f"spec.goal {self.goal.text!r}") != 0.0


def info_read(cost: Expression) -> tuple[str, float | None] | None:
    """``(KEY, default)`` when ``spec.cost`` is one read of ``info`` by a string key
    (``info["KEY"]``, default None, or ``info.get("KEY", number)``), else None. A caller that
    reads the step's cost itself (the rollout) takes, on an ``info`` that is a ``dict``,
    ``info.get(KEY, default)`` as the step's cost when it is a finite Python float — exactly what
    :meth:`EpisodeSpec.step_cost` returns on a scope holding this ``info`` (the number,
    unchanged); in every other case (``info`` not a dict, a missing key, a value of another
    type, a non-finite one) :meth:`EpisodeSpec.step_cost` decides, which gives the value or the
    error."""
    read = cost.read
    if read is None or read.name != "info" or not isinstance(read.key, str):
        return None
    return read.key, read.default


@lru_cache(maxsize=64)
def compile_spec(cost: str, goal: str) -> EpisodeSpec:
    """Parse ``spec.cost`` and ``spec.goal`` (ConfigError naming the field when malformed)."""
    return EpisodeSpec(
        parse(cost_expression(cost), "spec.cost", names=STEP_NAMES),
        parse(goal_expression(goal), "spec.goal", names=EPISODE_NAMES),
    )


__all__ = [
    "EPISODE_NAMES",
    "STEP_NAMES",
    "EpisodeSpec",
    "EvalError",
    "compile_spec",
    "cost_expression",
    "goal_expression",
    "info_read",
    "step_scope",
]
