"""The one safe expression language of safecert configs (no ``eval``, no attribute access).

Used by the black-box spec (``spec.cost`` per step, ``spec.goal`` at an episode's end) and, in its
*labels* dialect, by the shield's ``unsafe``/``goal`` state sets. A small tokenizer and a
recursive-descent parser build a tree that is compiled once into closures; evaluation looks names
up in a scope mapping. Anything malformed, too long or too deeply nested, or naming a name or
function outside the allowed set, raises :class:`ConfigError` naming the field at parse time.

Guarantee on resources: a chain of operators of one precedence level (``a + b + …``,
``x[0][1]…``, ``a and b and …``) compiles to one loop, so parsing and evaluation use Python frames
in proportion to the *nesting* (parentheses, unary operators, calls, indices: at most
:data:`MAX_DEPTH` levels), never to the length — a 10,000-character chain cannot raise
``RecursionError``. Evaluation runs under ``numpy.errstate`` raising on overflow, invalid
operations and division by zero, so ``10**10**10``, ``sqrt(-1)`` or ``log(0)`` is one
:class:`EvalError` and no numpy warning reaches the user.

Grammar (precedence as in Python, lowest first)::

    or      := and (('or' | '||' | '|') and)*
    and     := not (('and' | '&&' | '&') not)*
    not     := ('not' | '!' | '~') not | compare
    compare := sum (('<' | '<=' | '>' | '>=' | '==' | '!=') sum)*     # chained like Python
    sum     := product (('+' | '-') product)*
    product := unary (('*' | '/' | '%') unary)*
    unary   := '-' unary | power
    power   := postfix ('**' unary)?
    postfix := atom ('[' or ']' | '.get' '(' or ',' or ')')*
    atom    := NUMBER | STRING | true | false | NAME | FUNC '(' or (',' or)* ')' | '(' or ')'

Functions: ``abs min max sqrt exp log sin cos tanh clip norm sum any all``. ``x[i]`` indexes an
array (an index outside it is an :class:`EvalError`) or a mapping (a missing key is an
:class:`EvalError` naming the key and the keys present); ``m.get(key, default)`` is the only way
to say what a missing key means — the default must be written.

The labels dialect (shield) tokenizes names with ``. : -`` inside them and allows only the boolean
operators, ``true``/``false`` and parentheses; :func:`eval_labels` evaluates it vectorised over
boolean arrays (the shield model's unsafe and goal sets).
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from safecert.errors import ConfigError

MAX_CHARS = 10_000
MAX_DEPTH = 64  # a few Python frames per level: far below the recursion limit

Dialect = Literal["full", "labels"]
Scope = Mapping[str, Any]
Compiled = Callable[[Scope], Any]

_FULL_TOKEN = re.compile(
    r"\s*((?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|\"[^\"]*\"|'[^']*'|\*\*|<=|>=|==|!=|&&|\|\|"
    r"|[-+*/%<>()\[\],.!~&|]|[A-Za-z_][A-Za-z0-9_]*)"
)
_LABEL_TOKEN = re.compile(r"\s*(\(|\)|&&|\|\||[&|!~]|[A-Za-z_][A-Za-z0-9_.:\-]*)")
_OR, _AND, _NOT = ("or", "||", "|"), ("and", "&&", "&"), ("not", "!", "~")
_COMPARE = {
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


_ARITH: dict[str, Callable[[Any, Any], Any]] = {
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


@dataclass(frozen=True)
class Expression:
    """A parsed expression: its ``text``, the ``names`` it reads, and its compiled evaluator."""

    text: str
    field: str
    names: frozenset[str]
    _run: Compiled
    #: ``(name, literal)`` for every ``name[literal]`` written in the text (e.g. ``("info",
    #: "cost")``, ``("obs", 3)``): what the expression may read, even on a branch not taken
    subscripts: frozenset[tuple[str, Any]] = frozenset()

    def evaluate(self, scope: Scope) -> Any:
        """The value on ``scope`` (names → values); :class:`EvalError` when it cannot be had.

        Floating-point overflow, an invalid operation (``sqrt(-1)``) and division by zero
        (``log(0)``) are EvalErrors naming the operation, never a numpy warning; underflow to 0
        is not an error."""
        try:
            with np.errstate(over="raise", invalid="raise", divide="raise", under="ignore"):
                return self._run(scope)
        except EvalError:
            raise
        except (TypeError, ValueError, IndexError, KeyError, ArithmeticError) as exc:
            raise EvalError(f"{_shorter(repr(self.text))}: {exc}") from None


def parse(
    text: str,
    field: str,
    *,
    names: Iterable[str],
    dialect: Dialect = "full",
) -> Expression:
    """Parse ``text`` into an :class:`Expression` over ``names`` (ConfigError on ``field``)."""
    if not isinstance(text, str):
        raise ConfigError(f"expected an expression string, got {type(text).__name__}", field=field)
    if len(text) > MAX_CHARS:
        raise ConfigError(f"expression longer than {MAX_CHARS} characters", field=field)
    allowed = frozenset(names)
    parser = _Parser(text, field, allowed, dialect)
    run = parser.parse()
    return Expression(text, field, frozenset(parser.used), run, frozenset(parser.subscripts))


def eval_labels(text: str, names: dict[str, np.ndarray], field: str) -> np.ndarray:
    """A boolean expression of the labels dialect over named boolean arrays (vectorised over
    states) — the shield's ``unsafe``/``goal`` sets. Unknown names raise ConfigError on ``field``."""
    expr = parse(text, field, names=names, dialect="labels")
    shape = next(iter(names.values())).shape if names else (0,)
    value = expr.evaluate(names)
    return np.array(np.broadcast_to(np.asarray(value, dtype=bool), shape))


def _truth(value: Any) -> Any:
    """Python truth for scalars; elementwise truth for arrays with dimensions (the shield)."""
    if isinstance(value, np.ndarray) and value.ndim > 0:
        return value.astype(bool)
    return bool(value)


class _Parser:
    def __init__(self, text: str, field: str, names: frozenset[str], dialect: Dialect) -> None:
        self.text, self.field, self.names, self.dialect = text, field, names, dialect
        self.shown = _shorter(repr(text))  # how messages quote the text (long ones cut)
        self.toks = self._tokens()
        self.pos = 0
        self.depth = 0
        self.used: set[str] = set()
        self.subscripts: set[tuple[str, Any]] = set()

    def error(self, message: str, fix: str | None = None) -> ConfigError:
        return ConfigError(message, field=self.field, fix=fix)

    def _tokens(self) -> list[str]:
        pattern = _FULL_TOKEN if self.dialect == "full" else _LABEL_TOKEN
        out, pos, text = [], 0, self.text.strip()
        while pos < len(text):
            m = pattern.match(text, pos)
            if m is None:
                raise self.error(
                    f"cannot parse {self.shown} at position {pos}",
                    fix="use names, numbers, operators, parentheses"
                    if self.dialect == "full"
                    else "use names, and/or/not, parentheses",
                )
            out.append(m.group(1))
            pos = m.end()
            while pos < len(text) and text[pos].isspace():
                pos += 1
        if not out:
            raise self.error("empty expression", fix="write e.g. 'a and not b' or 'obs[0] > 1'")
        return out

    def peek(self) -> str | None:
        return self.toks[self.pos] if self.pos < len(self.toks) else None

    def take(self) -> str:
        if self.pos >= len(self.toks):
            raise self.error(f"{self.shown} ends early", fix="complete the expression")
        self.pos += 1
        return self.toks[self.pos - 1]

    def expect(self, tok: str) -> None:
        got = self.peek()
        if self.take() != tok:
            raise self.error(f"expected {tok!r}, found {got!r} in {self.shown}")

    def parse(self) -> Compiled:
        run = self.p_or()
        if self.pos != len(self.toks):
            raise self.error(f"unexpected {self.toks[self.pos]!r} in {self.shown}")
        return run

    def nested(self, parse: Callable[[], Compiled]) -> Compiled:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error(f"expression nested deeper than {MAX_DEPTH}")
        try:
            return parse()
        finally:
            self.depth -= 1

    def p_or(self) -> Compiled:
        parts = [self.p_and()]
        while self.peek() in _OR:
            self.take()
            parts.append(self.p_and())
        return parts[0] if len(parts) == 1 else _bool_op(parts, is_and=False)

    def p_and(self) -> Compiled:
        parts = [self.p_not()]
        while self.peek() in _AND:
            self.take()
            parts.append(self.p_not())
        return parts[0] if len(parts) == 1 else _bool_op(parts, is_and=True)

    def p_not(self) -> Compiled:
        if self.peek() in _NOT:
            self.take()
            inner = self.nested(self.p_not)

            def negate(scope: Scope) -> Any:
                value = _truth(inner(scope))
                return ~value if isinstance(value, np.ndarray) else not value

            return negate
        return self.p_compare() if self.dialect == "full" else self.atom()

    def p_compare(self) -> Compiled:
        first = self.p_sum()
        ops: list[tuple[Callable[[Any, Any], Any], Compiled]] = []
        while self.peek() in _COMPARE:
            ops.append((_COMPARE[self.take()], self.p_sum()))
        if not ops:
            return first

        def compare(scope: Scope) -> Any:
            left = first(scope)
            result: Any = True
            for op, right_run in ops:
                right = right_run(scope)
                result = (
                    result & op(left, right)
                    if np.ndim(left) or np.ndim(right)
                    else (result and bool(op(left, right)))
                )
                left = right
            return result

        return compare

    def _binary_chain(self, sub: Callable[[], Compiled], table: dict[str, Any]) -> Compiled:
        """``a op b op c …`` as one left fold: evaluation depth does not grow with the chain."""
        first = sub()
        rest: list[tuple[Callable[[Any, Any], Any], Compiled]] = []
        while self.peek() in table:
            fn = table[self.take()]
            rest.append((fn, sub()))
        return first if not rest else _fold(first, rest)

    def p_sum(self) -> Compiled:
        return self._binary_chain(self.p_product, {"+": _ARITH["+"], "-": _ARITH["-"]})

    def p_product(self) -> Compiled:
        return self._binary_chain(
            self.p_unary, {"*": _ARITH["*"], "/": _ARITH["/"], "%": _ARITH["%"]}
        )

    def p_unary(self) -> Compiled:
        if self.peek() == "-":
            self.take()
            inner = self.nested(self.p_unary)
            return lambda scope: -inner(scope)
        if self.peek() == "+":
            self.take()
            return self.nested(self.p_unary)
        base = self.p_postfix()
        if self.peek() == "**":
            self.take()
            exponent = self.nested(self.p_unary)
            return _binary(lambda a, b: np.power(np.asarray(a, dtype=float), b), base, exponent)
        return base

    def p_postfix(self) -> Compiled:
        """``atom [i] .get(k, d) [j] …`` as one loop over the steps (no closure per step)."""
        run = self.atom()
        label = self._describe(run)
        steps: list[Callable[[Any, Scope], Any]] = []
        while self.peek() in ("[", "."):
            if self.take() == "[":
                start = self.pos
                index = self.nested(self.p_or)
                self.expect("]")
                literal = self.toks[start] if self.pos - start == 2 else None
                if literal is not None and not steps and hasattr(run, "label"):
                    if run.label in self.names:
                        value = literal[1:-1] if literal[0] in "\"'" else _int_or_none(literal)
                        if value is not None:
                            self.subscripts.add((run.label, value))
                steps.append(_subscript(index, label))
                label = _shorter(f"{label}[…]")
            else:
                method = self.take()
                if method != "get":
                    raise self.error(
                        f"unknown method {method!r} in {self.shown}",
                        fix='only m.get(key, default) is allowed, e.g. info.get("cost", 0)',
                    )
                self.expect("(")
                key = self.nested(self.p_or)
                if self.peek() != ",":
                    raise self.error(
                        f"get() needs a default in {self.shown}",
                        fix='write the default out, e.g. info.get("cost", 0)',
                    )
                self.take()
                default = self.nested(self.p_or)
                self.expect(")")
                steps.append(_get(key, default))
                label = _shorter(f"{label}.get(…)")
        return run if not steps else _chain(run, steps)

    def _describe(self, run: Compiled) -> str:
        return getattr(run, "label", "value")

    def atom(self) -> Compiled:
        tok = self.take()
        if tok == "(":
            run = self.nested(self.p_or)
            if self.take() != ")":
                raise self.error(f"missing ')' in {self.shown}")
            return run
        if tok in ("true", "True", "false", "False"):
            value = tok in ("true", "True")
            return lambda scope: value
        if self.dialect == "full":
            if tok[0].isdigit() or tok[0] == ".":
                number = float(tok)
                return lambda scope: number
            if tok[0] in "\"'":
                string = tok[1:-1]
                return lambda scope: string
            if tok in FUNCTIONS and self.peek() == "(":
                return self.call(tok)
        if tok in self.names:
            self.used.add(tok)

            def lookup(scope: Scope, name: str = tok) -> Any:
                try:
                    return scope[name]
                except KeyError:
                    raise EvalError(f"{name} is not available here") from None

            lookup.label = tok  # type: ignore[attr-defined]
            return lookup
        if self.dialect == "full" and not re.fullmatch(r"[A-Za-z_]\w*", tok):
            raise self.error(f"unexpected {tok!r} in {self.shown}")
        allowed = ", ".join(sorted(self.names)[:20])
        functions = f"; functions: {', '.join(FUNCTIONS)}" if self.dialect == "full" else ""
        known = [*self.names, *(FUNCTIONS if self.dialect == "full" else ())]
        close = difflib.get_close_matches(tok, known, n=1)
        guess = f"did you mean {close[0]!r}? " if close else ""
        raise self.error(
            f"unknown name {tok!r} in {self.shown}",
            fix=f"{guess}use one of: {allowed}" + functions,
        )

    def call(self, name: str) -> Compiled:
        fn, arities = FUNCTIONS[name]
        self.expect("(")
        args = [self.nested(self.p_or)]
        while self.peek() == ",":
            self.take()
            args.append(self.nested(self.p_or))
        self.expect(")")
        if len(args) not in arities:
            raise self.error(
                f"{name}() takes {' or '.join(map(str, arities[:2]))} argument(s), "
                f"got {len(args)} in {self.shown}"
            )
        return lambda scope: fn(*(a(scope) for a in args))


def _shorter(label: str, limit: int = 60) -> str:
    """A message's name for a value: long chains keep their start (bounded, not quadratic)."""
    return label if len(label) <= limit else label[: limit - 1] + "…"


def _int_or_none(token: str) -> int | None:
    try:
        return int(token)
    except ValueError:
        return None


def _bool_op(parts: list[Compiled], *, is_and: bool) -> Compiled:
    def run(scope: Scope) -> Any:
        value = _truth(parts[0](scope))
        for part in parts[1:]:
            if not isinstance(value, np.ndarray) and value != is_and:
                return value  # short-circuit, as Python does
            other = _truth(part(scope))
            if isinstance(value, np.ndarray) or isinstance(other, np.ndarray):
                value = np.logical_and(value, other) if is_and else np.logical_or(value, other)
            else:
                value = other
        return value

    return run


def _binary(fn: Callable[[Any, Any], Any], left: Compiled, right: Compiled) -> Compiled:
    return lambda scope: fn(left(scope), right(scope))


def _fold(first: Compiled, rest: list[tuple[Callable[[Any, Any], Any], Compiled]]) -> Compiled:
    def run(scope: Scope) -> Any:
        value = first(scope)
        for fn, operand in rest:
            value = fn(value, operand(scope))
        return value

    return run


def _chain(owner: Compiled, steps: list[Callable[[Any, Scope], Any]]) -> Compiled:
    def run(scope: Scope) -> Any:
        value = owner(scope)
        for step in steps:
            value = step(value, scope)
        return value

    return run


def _subscript(index: Compiled, label: str) -> Callable[[Any, Scope], Any]:
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


def _get(key: Compiled, default: Compiled) -> Callable[[Any, Scope], Any]:
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
