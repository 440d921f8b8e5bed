"""The evaluation half of :mod:`safecert.expressions`: operators, functions and the compiled
steps the parser composes (folds over operator chains, loops over index chains), and the one-line
:class:`EvalError`.

Every step here calls the closures it was given once per evaluation and loops over chains, so the
Python frames an evaluation uses grow with the expression's nesting, never with its length.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

Scope = Mapping[str, Any]
Compiled = Callable[[Scope], Any]

COMPARE = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}


def _safe_div(a: Any, b: Any) -> Any:
    if np.ndim(b) == 0 and b == 0:
        raise EvalError("division by zero")
    return a / b


def _safe_mod(a: Any, b: Any) -> Any:
    if np.ndim(b) == 0 and b == 0:
        raise EvalError("modulo by zero")
    return a % b


ARITH: dict[str, Callable[[Any, Any], Any]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": _safe_div,
    "%": _safe_mod,
}


def _reduce(fn: Callable[..., Any], elementwise: Callable[..., Any]) -> Callable[..., Any]:
    """``min(x)`` reduces an array; ``min(a, b, …)`` is elementwise."""

    def call(*args: Any) -> Any:
        if len(args) == 1:
            return fn(np.asarray(args[0], dtype=float))
        out = args[0]
        for arg in args[1:]:
            out = elementwise(out, arg)
        return out

    return call


#: name → (function, allowed argument counts)
FUNCTIONS: dict[str, tuple[Callable[..., Any], tuple[int, ...]]] = {
    "abs": (np.abs, (1,)),
    "min": (_reduce(np.min, np.minimum), (1, 2, 3, 4, 5, 6, 7, 8)),
    "max": (_reduce(np.max, np.maximum), (1, 2, 3, 4, 5, 6, 7, 8)),
    "sqrt": (np.sqrt, (1,)),
    "exp": (np.exp, (1,)),
    "log": (np.log, (1,)),
    "sin": (np.sin, (1,)),
    "cos": (np.cos, (1,)),
    "tanh": (np.tanh, (1,)),
    "clip": (np.clip, (3,)),
    "norm": (lambda x: np.linalg.norm(np.asarray(x, dtype=float)), (1,)),
    "sum": (lambda x: np.sum(np.asarray(x, dtype=float)), (1,)),
    "any": (lambda x: bool(np.any(x)), (1,)),
    "all": (lambda x: bool(np.all(x)), (1,)),
}


class EvalError(Exception):
    """An expression could not be evaluated on this scope (a missing key, an index outside an
    array, a division by zero); ``reason`` is one line naming what is missing and what exists."""

    def __init__(self, reason: str) -> None:
        self.reason = " ".join(str(reason).split())
        super().__init__(self.reason)


def truth(value: Any) -> Any:
    """Python truth for scalars; elementwise truth for arrays with dimensions (the shield)."""
    if isinstance(value, np.ndarray) and value.ndim > 0:
        return value.astype(bool)
    return bool(value)


def shorter(label: str, limit: int = 60) -> str:
    """A message's name for a value: long chains keep their start (bounded, not quadratic)."""
    return label if len(label) <= limit else label[: limit - 1] + "…"


def int_or_none(token: str) -> int | None:
    try:
        return int(token)
    except ValueError:
        return None


def bool_op(parts: list[Compiled], *, is_and: bool) -> Compiled:
    def run(scope: Scope) -> Any:
        value = truth(parts[0](scope))
        for part in parts[1:]:
            if not isinstance(value, np.ndarray) and value != is_and:
                return value  # short-circuit, as Python does
            other = truth(part(scope))
            if isinstance(value, np.ndarray) or isinstance(other, np.ndarray):
                value = np.logical_and(value, other) if is_and else np.logical_or(value, other)
            else:
                value = other
        return value

    return run


def binary(fn: Callable[[Any, Any], Any], left: Compiled, right: Compiled) -> Compiled:
    return lambda scope: fn(left(scope), right(scope))


def fold(first: Compiled, rest: list[tuple[Callable[[Any, Any], Any], Compiled]]) -> Compiled:
    def run(scope: Scope) -> Any:
        value = first(scope)
        for fn, operand in rest:
            value = fn(value, operand(scope))
        return value

    return run


def chain(owner: Compiled, steps: list[Callable[[Any, Scope], Any]]) -> Compiled:
    def run(scope: Scope) -> Any:
        value = owner(scope)
        for step in steps:
            value = step(value, scope)
        return value

    return run


def subscript(index: Compiled, label: str) -> Callable[[Any, Scope], Any]:
    """``obj[index]``: a mapping's key (missing: EvalError naming the keys present) or an array's
    whole-number index (outside: EvalError naming the shape)."""

    def step(obj: Any, scope: Scope) -> Any:
        key = index(scope)
        if type(obj) is dict or isinstance(obj, Mapping):
            if key not in obj:
                present = ", ".join(sorted(map(str, obj))[:20]) or "none"
                raise EvalError(f"{label} has no key {key!r} (keys present: {present})")
            return obj[key]
        if isinstance(key, str):
            raise EvalError(f"{label} is not a mapping: cannot index it with {key!r}")
        arr = np.asarray(obj)
        if not isinstance(key, int | float | np.integer | np.floating) or float(key) != int(key):
            raise EvalError(f"{label}[{key!r}]: an index must be a whole number")
        i = int(key)
        if arr.ndim == 0 or not -arr.shape[0] <= i < arr.shape[0]:
            raise EvalError(f"{label}[{i}] is out of range ({label} has shape {arr.shape})")
        return arr[i]

    return step


def get_step(key: Compiled, default: Compiled) -> Callable[[Any, Scope], Any]:
    def step(obj: Any, scope: Scope) -> Any:
        if not isinstance(obj, Mapping):
            raise EvalError(f"get() needs a mapping, got {type(obj).__name__}")
        k = key(scope)
        return obj[k] if k in obj else default(scope)

    return step


def as_number(value: Any, what: str) -> float:
    """A finite float from a scalar expression value (booleans count 1/0); EvalError otherwise."""
    if type(value) is float and math.isfinite(value):  # the common case, without numpy
        return value
    arr = np.asarray(value)
    if arr.ndim != 0 or arr.dtype.kind not in "biuf":
        raise EvalError(f"{what} must be one number, got {arr.tolist()!r}")
    number = float(arr)
    if not math.isfinite(number):
        raise EvalError(f"{what} is not finite ({number})")
    return number
