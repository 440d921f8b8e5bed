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
``RecursionError``. Evaluation runs under numpy's error state raising on overflow, invalid
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
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy._core import _ufunc_config  # type: ignore[attr-defined]

from safecert.errors import ConfigError
from safecert.expressions.runtime import (
    ARITH,
    COMPARE,
    FUNCTIONS,
    Compiled,
    EvalError,
    Scope,
    as_number,
    binary,
    bool_op,
    chain,
    fold,
    get_step,
    int_or_none,
    shorter,
    subscript,
    truth,
)

MAX_CHARS = 10_000
MAX_DEPTH = 64  # a few Python frames per level: far below the recursion limit

Dialect = Literal["full", "labels"]

_FULL_TOKEN = re.compile(
    r"\s*((?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|\"[^\"]*\"|'[^']*'|\*\*|<=|>=|==|!=|&&|\|\|"
    r"|[-+*/%<>()\[\],.!~&|]|[A-Za-z_][A-Za-z0-9_]*)"
)
_LABEL_TOKEN = re.compile(r"\s*(\(|\)|&&|\|\||[&|!~]|[A-Za-z_][A-Za-z0-9_.:\-]*)")
_OR, _AND, _NOT = ("or", "||", "|"), ("and", "&&", "&"), ("not", "!", "~")


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
    #: the whole expression is one read of a name by a literal key: ``name[key]`` or
    #: ``name.get(key, number)`` (:class:`Read`); None for every other expression
    read: Read | None = None

    def evaluate(self, scope: Scope) -> Any:
        """The value on ``scope`` (names → values); :class:`EvalError` when it cannot be had.

        Floating-point overflow, an invalid operation (``sqrt(-1)``) and division by zero
        (``log(0)``) are EvalErrors naming the operation, never a numpy warning; underflow to 0
        is not an error. The error state is switched by setting numpy's context variable to a
        prepared state (about 0.3 µs; ``numpy.errstate`` builds it anew, about 3 µs): a black-box
        cost runs once per step of every episode."""
        token = _ERRSTATE.set(_RAISING)
        try:
            return self._run(scope)
        except EvalError:
            raise
        except (TypeError, ValueError, IndexError, KeyError, ArithmeticError) as exc:
            raise EvalError(f"{shorter(repr(self.text))}: {exc}") from None
        finally:
            _ERRSTATE.reset(token)


@dataclass(frozen=True)
class Read:
    """An expression that is one read: ``name[key]`` (``default`` None) or
    ``name.get(key, default)`` with a number written as the default.

    On a scope whose ``name`` is a ``dict`` (and only there: an array index has rules of its
    own), :meth:`Expression.evaluate` of such an expression returns ``scope[name][key]`` when
    the key is present, else ``default`` (``.get``) or an :class:`EvalError` (``[key]``): a
    caller may read the value itself and leave only the other cases to ``evaluate``."""

    name: str
    key: str | int
    default: float | None = None


def _read(tokens: list[str], names: frozenset[str]) -> Read | None:
    """The :class:`Read` the tokens spell out whole, if any (a syntactic match on the tokens of
    an expression that parsed: ``NAME [ LITERAL ]`` or ``NAME . get ( STRING , NUMBER )``)."""
    if not tokens or tokens[0] not in names:
        return None
    if len(tokens) == 4 and tokens[1] == "[" and tokens[3] == "]":
        literal = tokens[2]
        if literal[0] in "\"'":
            return Read(tokens[0], literal[1:-1])
        index = int_or_none(literal)
        return None if index is None else Read(tokens[0], index)
    if (
        len(tokens) == 8
        and tokens[1:4] == [".", "get", "("]
        and tokens[4][0] in "\"'"
        and tokens[5] == ","
        and (tokens[6][0].isdigit() or tokens[6][0] == ".")
        and tokens[7] == ")"
    ):
        return Read(tokens[0], tokens[4][1:-1], float(tokens[6]))
    return None


#: numpy 2's error-state context variable and the state ``numpy.errstate(over="raise",
#: invalid="raise", divide="raise", under="ignore")`` sets (numpy internals; numpy is pinned < 3,
#: and tests/blackbox/test_step_cost.py checks the switch against ``numpy.errstate`` itself)
_ERRSTATE = _ufunc_config._extobj_contextvar  # type: ignore[attr-defined]  # not in numpy's stubs
_RAISING = _ufunc_config._make_extobj(  # type: ignore[attr-defined]
    over="raise", invalid="raise", divide="raise", under="ignore"
)


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
    read = _read(parser.toks, allowed) if dialect == "full" else None
    return Expression(text, field, frozenset(parser.used), run, frozenset(parser.subscripts), read)


def eval_labels(text: str, names: dict[str, np.ndarray], field: str) -> np.ndarray:
    """A boolean expression of the labels dialect over named boolean arrays (vectorised over
    states) — the shield's ``unsafe``/``goal`` sets. Unknown names raise ConfigError on ``field``."""
    expr = parse(text, field, names=names, dialect="labels")
    shape = next(iter(names.values())).shape if names else (0,)
    value = expr.evaluate(names)
    return np.array(np.broadcast_to(np.asarray(value, dtype=bool), shape))


class _Parser:
    def __init__(self, text: str, field: str, names: frozenset[str], dialect: Dialect) -> None:
        self.text, self.field, self.names, self.dialect = text, field, names, dialect
        self.shown = shorter(repr(text))  # how messages quote the text (long ones cut)
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
        return parts[0] if len(parts) == 1 else bool_op(parts, is_and=False)

    def p_and(self) -> Compiled:
        parts = [self.p_not()]
        while self.peek() in _AND:
            self.take()
            parts.append(self.p_not())
        return parts[0] if len(parts) == 1 else bool_op(parts, is_and=True)

    def p_not(self) -> Compiled:
        if self.peek() in _NOT:
            self.take()
            inner = self.nested(self.p_not)

            def negate(scope: Scope) -> Any:
                value = truth(inner(scope))
                return ~value if isinstance(value, np.ndarray) else not value

            return negate
        return self.p_compare() if self.dialect == "full" else self.atom()

    def p_compare(self) -> Compiled:
        first = self.p_sum()
        ops: list[tuple[Callable[[Any, Any], Any], Compiled]] = []
        while self.peek() in COMPARE:
            ops.append((COMPARE[self.take()], self.p_sum()))
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
        return first if not rest else fold(first, rest)

    def p_sum(self) -> Compiled:
        return self._binary_chain(self.p_product, {"+": ARITH["+"], "-": ARITH["-"]})

    def p_product(self) -> Compiled:
        return self._binary_chain(self.p_unary, {"*": ARITH["*"], "/": ARITH["/"], "%": ARITH["%"]})

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
            return binary(lambda a, b: np.power(np.asarray(a, dtype=float), b), base, exponent)
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
                        value = literal[1:-1] if literal[0] in "\"'" else int_or_none(literal)
                        if value is not None:
                            self.subscripts.add((run.label, value))
                steps.append(subscript(index, label))
                label = shorter(f"{label}[…]")
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
                steps.append(get_step(key, default))
                label = shorter(f"{label}.get(…)")
        return run if not steps else chain(run, steps)

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


__all__ = [
    "FUNCTIONS",
    "MAX_CHARS",
    "MAX_DEPTH",
    "EvalError",
    "Expression",
    "Read",
    "as_number",
    "eval_labels",
    "parse",
]
