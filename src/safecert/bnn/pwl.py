"""A piecewise-linear expression language for closed-loop dynamics: one compiled object, two uses.

Forms (everything else is a one-line :class:`~safecert.errors.ConfigError` naming the expression and
the supported forms)::

    3.5   pi   x   u            numbers, the constant pi, state / action / defined names
    a + b   a - b   -a          sums
    2 * a   a * 2   a / 4       multiplication and division by a constant only
    clip(e, lo, hi)             lo, hi constants with lo <= hi
    min(a, b, …)  max(a, b, …)  two or more arguments
    abs(e)   relu(e)
    pwl(e, [x0, x1, …], [y0, y1, …])
                                piecewise-linear interpolation through (x_k, y_k), x strictly
                                increasing, constant beyond the end points (numpy.interp)

Expressions are parsed with :mod:`ast` in ``eval`` mode and walked over a whitelist of node types
(as :mod:`safecert.expressions` does with its own grammar): nothing is ever evaluated by
Python, and length and nesting are bounded (:data:`MAX_CHARS`, :data:`MAX_DEPTH`).

A parsed expression is a tree of :class:`Node` objects with two interpreters:

* :func:`evaluate` — float64, vectorised over a batch of states (the simulator);
* :class:`MilpEncoder` — the exact MILP encoding with the building blocks of
  :mod:`safecert.bnn.encoding` (affine forms stay symbolic; ``clip``/``abs``/``pwl`` become
  :func:`~safecert.bnn.encoding.piecewise_linear`, ``relu`` one ReLU, ``max(a, b) = a + relu(b − a)``,
  ``min(a, b) = a − relu(a − b)``).

Guarantee: both interpreters walk the same tree, so the MILP's projection onto (inputs, value) is
the graph of the float64 function (up to rounding, ≤ 1e-9 on the shipped systems; tested for every
form). Assumption: the inputs' MILP bounds are sound (the encoder's big-M constants come from them).
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from safecert.bnn.encoding import Bounded, linear_combination, piecewise_linear, relu
from safecert.bnn.solvers import Milp
from safecert.errors import ConfigError

MAX_CHARS = 4_000
MAX_DEPTH = 48
FORMS = (
    "numbers, names, + -, * and / by a constant, clip(e, lo, hi), min(…), max(…), abs(e), "
    "relu(e), pwl(e, [x…], [y…])"
)
CONSTANTS = {"pi": math.pi}


# ---- the tree ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Node:
    """Base of the expression tree."""


@dataclass(frozen=True)
class Const(Node):
    value: float


@dataclass(frozen=True)
class Name(Node):
    name: str


@dataclass(frozen=True)
class Linear(Node):
    """``Σ coef_k · term_k + const``."""

    terms: tuple[tuple[float, Node], ...]
    const: float


@dataclass(frozen=True)
class Call(Node):
    """``clip``/``min``/``max``/``abs``/``relu``/``pwl`` of ``args``; ``params`` holds the constant
    arguments (clip bounds, pwl break points then values)."""

    fn: str
    args: tuple[Node, ...]
    params: tuple[float, ...] = ()


# ---- parsing -------------------------------------------------------------------------------------
def _fail(text: str, field: str, what: str) -> ConfigError:
    short = text if len(text) <= 80 else text[:77] + "..."
    return ConfigError(f"{what} in {short!r}", field=field, fix=f"use only: {FORMS}")


def parse(text: str, names: Sequence[str], field: str, *, shown: str | None = None) -> Node:
    """Parse one expression over ``names`` (state, action and defined names) into a :class:`Node`.
    ``shown``: the user's own text that errors quote when ``text`` was derived from it (an
    inequality ``lhs <= rhs`` is parsed as ``(lhs) - (rhs)``).

    Raises ConfigError naming ``field`` for anything outside the language (module docstring):
    unknown names, wrong arity, non-constant bounds, products of two variables, unsupported
    functions or operators, non-finite constants, too long or too deeply nested input."""
    if not isinstance(text, str):
        raise ConfigError(f"expected a string, got {type(text).__name__}", field=field)
    if len(text) > MAX_CHARS:
        raise ConfigError(f"longer than {MAX_CHARS} characters", field=field, fix="simplify")
    depth = 0
    for ch in text:  # bound the nesting before ast (whose parser recurses) sees it
        depth += 1 if ch in "([" else -1 if ch in ")]" else 0
        if depth > MAX_DEPTH:
            raise ConfigError(
                f"nested deeper than {MAX_DEPTH}", field=field, fix="use [dynamics.define]"
            )
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise _fail(text if shown is None else shown, field, "cannot parse") from None
    known = set(names)
    return _Builder(text if shown is None else shown, field, known).node(tree.body, 0)


class _Builder:
    def __init__(self, text: str, field: str, known: set[str]) -> None:
        self.text, self.field, self.known = text, field, known

    def fail(self, what: str) -> ConfigError:
        return _fail(self.text, self.field, what)

    def const(self, node: ast.expr, depth: int) -> float:
        """A constant sub-expression (clip bounds, pwl points), folded."""
        n = self.node(node, depth)
        if not isinstance(n, Const):
            raise self.fail(f"{ast.unparse(node)!r} must be a constant")
        return n.value

    def node(self, e: ast.expr, depth: int) -> Node:
        if depth > MAX_DEPTH:
            raise self.fail(f"nesting deeper than {MAX_DEPTH}")
        d = depth + 1
        if isinstance(e, ast.Constant):
            if isinstance(e.value, bool) or not isinstance(e.value, int | float):
                raise self.fail(f"{e.value!r} is not a number")
            if isinstance(e.value, int) and abs(e.value) > 10**12:  # float() would overflow
                raise self.fail(f"constant of {len(str(abs(e.value)))} digits exceeds 1e12")
            return _finite(float(e.value), self)
        if isinstance(e, ast.Name):
            if e.id in self.known:
                return Name(e.id)
            if e.id in CONSTANTS:
                return Const(CONSTANTS[e.id])
            raise self.fail(f"unknown variable {e.id!r} (known: {', '.join(sorted(self.known))})")
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub | ast.UAdd):
            inner = self.node(e.operand, d)
            return _scale(inner, -1.0 if isinstance(e.op, ast.USub) else 1.0)
        if isinstance(e, ast.BinOp):
            a, b = self.node(e.left, d), self.node(e.right, d)
            if isinstance(e.op, ast.Add | ast.Sub):
                return _add(a, _scale(b, -1.0) if isinstance(e.op, ast.Sub) else b, self)
            if isinstance(e.op, ast.Mult):
                if isinstance(a, Const):
                    return _scale(b, a.value, self)
                if isinstance(b, Const):
                    return _scale(a, b.value, self)
                raise self.fail(
                    f"product of two variables {ast.unparse(e)!r} is not piecewise-linear"
                )
            if isinstance(e.op, ast.Div):
                if not isinstance(b, Const) or b.value == 0.0:
                    raise self.fail(f"{ast.unparse(e)!r} divides by a non-constant or by zero")
                return _scale(a, 1.0 / b.value, self)
            raise self.fail(f"operator {type(e.op).__name__} is not supported")
        if isinstance(e, ast.Call):
            return self.call(e, d)
        raise self.fail(f"{type(e).__name__} {ast.unparse(e)!r} is not supported")

    def call(self, e: ast.Call, d: int) -> Node:
        if not isinstance(e.func, ast.Name) or e.keywords:
            raise self.fail(f"{ast.unparse(e.func)!r} is not a supported function")
        fn, args = e.func.id, e.args
        arity = {"clip": 3, "abs": 1, "relu": 1, "pwl": 3}
        if fn in arity and len(args) != arity[fn]:
            raise self.fail(f"{fn} takes {arity[fn]} arguments, got {len(args)}")
        if fn in ("min", "max"):
            if len(args) < 2:
                raise self.fail(f"{fn} takes two or more arguments, got {len(args)}")
            parts = tuple(self.node(a, d) for a in args)
            if all(isinstance(p, Const) for p in parts):
                vals = [p.value for p in parts]  # type: ignore[attr-defined]
                return Const(min(vals) if fn == "min" else max(vals))
            return Call(fn, parts)
        if fn == "clip":
            lo, hi = self.const(args[1], d), self.const(args[2], d)
            if lo > hi:
                raise self.fail(f"clip bounds {lo} > {hi}")
            return _fold(Call("clip", (self.node(args[0], d),), (lo, hi)))
        if fn in ("abs", "relu"):
            return _fold(Call(fn, (self.node(args[0], d),)))
        if fn == "pwl":
            xs, ys = self.points(args[1], d), self.points(args[2], d)
            if len(xs) != len(ys) or len(xs) < 2:
                raise self.fail(
                    f"pwl needs two lists of equal length ≥ 2, got {len(xs)}, {len(ys)}"
                )
            if any(b <= a for a, b in zip(xs, xs[1:], strict=False)):
                raise self.fail("pwl break points must be strictly increasing")
            return _fold(Call("pwl", (self.node(args[0], d),), (*xs, *ys)))
        raise self.fail(f"function {fn!r} is not supported (sin, cos, … are not piecewise-linear)")

    def points(self, e: ast.expr, d: int) -> list[float]:
        if not isinstance(e, ast.List | ast.Tuple):
            raise self.fail(f"{ast.unparse(e)!r} must be a list of constants")
        return [self.const(v, d) for v in e.elts]


def _finite(v: float, b: _Builder) -> Const:
    if not math.isfinite(v) or abs(v) > 1e12:
        raise b.fail(f"constant {v!r} is not finite or exceeds 1e12")
    return Const(v)


def _as_linear(n: Node) -> Linear:
    if isinstance(n, Linear):
        return n
    if isinstance(n, Const):
        return Linear((), n.value)
    return Linear(((1.0, n),), 0.0)


def _simplify(lin: Linear) -> Node:
    terms = tuple((c, t) for c, t in lin.terms if c != 0.0)
    if not terms:
        return Const(lin.const)
    if len(terms) == 1 and terms[0][0] == 1.0 and lin.const == 0.0:
        return terms[0][1]
    return Linear(terms, lin.const)


def _checked(lin: Linear, b: _Builder | None) -> Node:
    """``lin`` simplified, every coefficient and the constant finite and at most 1e12."""
    if b is not None:
        for v in (lin.const, *(c for c, _ in lin.terms)):
            _finite(v, b)
    return _simplify(lin)


def _scale(n: Node, k: float, b: _Builder | None = None) -> Node:
    lin = _as_linear(n)
    return _checked(Linear(tuple((k * c, t) for c, t in lin.terms), k * lin.const), b)


def _add(a: Node, c: Node, b: _Builder) -> Node:
    la, lc = _as_linear(a), _as_linear(c)
    merged: dict[Node, float] = {}
    for coef, t in (*la.terms, *lc.terms):
        merged[t] = merged.get(t, 0.0) + coef
    return _checked(Linear(tuple((v, t) for t, v in merged.items()), la.const + lc.const), b)


def _fold(call: Call) -> Node:
    """A call of a constant is a constant (computed by the simulator's own code)."""
    if all(isinstance(a, Const) for a in call.args):
        return Const(float(evaluate(call, {}, ())))
    return call


# ---- float64 interpreter -------------------------------------------------------------------------
def _pwl_fn(params: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    n = len(params) // 2
    return np.asarray(params[:n]), np.asarray(params[n:])


def apply(fn: str, params: tuple[float, ...], v: np.ndarray) -> np.ndarray:
    """The scalar function of a one-argument :class:`Call` (``clip``/``abs``/``relu``/``pwl``)."""
    if fn == "clip":
        return np.clip(v, params[0], params[1])
    if fn == "abs":
        return np.abs(v)
    if fn == "relu":
        return np.maximum(v, 0.0)
    xs, ys = _pwl_fn(params)
    return np.interp(v, xs, ys)


def evaluate(node: Node, env: Mapping[str, np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    """Float64 value of ``node`` with names bound to arrays of shape ``shape``."""
    if isinstance(node, Const):
        return np.full(shape, node.value)
    if isinstance(node, Name):
        return np.asarray(env[node.name], dtype=np.float64)
    if isinstance(node, Linear):
        out = np.full(shape, node.const)
        for c, t in node.terms:
            out = out + c * evaluate(t, env, shape)
        return out
    assert isinstance(node, Call)
    vals = [evaluate(a, env, shape) for a in node.args]
    if node.fn == "max":
        return np.maximum.reduce(vals)
    if node.fn == "min":
        return np.minimum.reduce(vals)
    return apply(node.fn, node.params, vals[0])


# ---- MILP interpreter ----------------------------------------------------------------------------
@dataclass(frozen=True)
class _Aff:
    """An affine form over MILP columns: ``Σ coef·x[col] + const`` (kept symbolic until needed)."""

    terms: tuple[tuple[int, float], ...]
    const: float


class MilpEncoder:
    """Encodes expression trees into one :class:`Milp` over named columns (each a 1-column
    :class:`Bounded`). Affine forms are materialised as a column only where a non-linear form or
    the caller needs one; a name bound once is shared by every expression that uses it.
    ``integer``: the expressions map integers to integers (:func:`integral`), so the columns
    they create are declared integer (tighter bounds, better solver numerics)."""

    def __init__(
        self, milp: Milp, columns: Mapping[str, Bounded], *, integer: bool = False
    ) -> None:
        self.milp, self.integer = milp, integer
        self.cols: dict[str, Bounded] = dict(columns)
        self.bounds: dict[int, tuple[float, float]] = {
            int(b.idx[0]): (float(b.lo[0]), float(b.hi[0])) for b in columns.values()
        }

    def bind(self, name: str, node: Node) -> Bounded:
        """Encode ``node`` as a column and make it available as ``name``."""
        col = self.column(node)
        self.cols[name] = col
        return col

    def column(self, node: Node) -> Bounded:
        return self._materialise(self._aff(node))

    def _register(self, b: Bounded) -> _Aff:
        j = int(b.idx[0])
        self.bounds[j] = (float(b.lo[0]), float(b.hi[0]))
        return _Aff(((j, 1.0),), 0.0)

    def _materialise(self, a: _Aff) -> Bounded:
        if len(a.terms) == 1 and a.terms[0][1] == 1.0 and a.const == 0.0:
            j = a.terms[0][0]
            lo, hi = self.bounds[j]
            return Bounded(np.array([j]), np.array([lo]), np.array([hi]))
        if not a.terms:  # a constant column
            col = self.milp.add_vars(np.array([a.const]), np.array([a.const]))
            b = Bounded(col, np.array([a.const]), np.array([a.const]))
            self._register(b)
            return b
        idx = np.array([j for j, _ in a.terms])
        s = Bounded(
            idx,
            np.array([self.bounds[j][0] for j in idx]),
            np.array([self.bounds[j][1] for j in idx]),
        )
        coef = np.array([c for _, c in a.terms])
        out = linear_combination(self.milp, s, coef, const=a.const, integer=self.integer)
        self._register(out)
        return out

    def _aff(self, node: Node) -> _Aff:
        if isinstance(node, Const):
            return _Aff((), node.value)
        if isinstance(node, Name):
            return self._register(self.cols[node.name])
        if isinstance(node, Linear):
            acc: dict[int, float] = {}
            const = node.const
            for c, t in node.terms:
                sub = self._aff(t)
                const += c * sub.const
                for j, k in sub.terms:
                    acc[j] = acc.get(j, 0.0) + c * k
            return _Aff(tuple((j, k) for j, k in acc.items() if k != 0.0), const)
        assert isinstance(node, Call)
        if node.fn in ("max", "min"):
            acc_aff = self._aff(node.args[0])
            for other in node.args[1:]:
                nxt = self._aff(other)
                # max(a, b) = a + relu(b − a);  min(a, b) = a − relu(a − b)
                diff = _sub(nxt, acc_aff) if node.fn == "max" else _sub(acc_aff, nxt)
                r = self._register(relu(self.milp, self._materialise(diff)))
                acc_aff = _plus(acc_aff, r, 1.0 if node.fn == "max" else -1.0)
            return acc_aff
        x = self._materialise(self._aff(node.args[0]))
        if node.fn == "relu":
            return self._register(relu(self.milp, x))
        if node.fn == "clip":
            kinks: tuple[float, ...] = node.params
        elif node.fn == "abs":
            kinks = (0.0,)
        else:
            kinks = tuple(_pwl_fn(node.params)[0])
        fn, params = node.fn, node.params
        y = piecewise_linear(
            self.milp, x, lambda v: apply(fn, params, v), kinks=kinks, integer=self.integer
        )
        return self._register(y)


def _plus(a: _Aff, b: _Aff, k: float) -> _Aff:
    acc = dict(a.terms)
    for j, c in b.terms:
        acc[j] = acc.get(j, 0.0) + k * c
    return _Aff(tuple((j, c) for j, c in acc.items() if c != 0.0), a.const + k * b.const)


def _sub(a: _Aff, b: _Aff) -> _Aff:
    return _plus(a, b, -1.0)


# ---- properties used by the system's checks -------------------------------------------------------
def names_in(node: Node) -> set[str]:
    if isinstance(node, Name):
        return {node.name}
    if isinstance(node, Linear):
        return set().union(*(names_in(t) for _, t in node.terms))
    if isinstance(node, Call):
        return set().union(*(names_in(a) for a in node.args))
    return set()


def integral(node: Node) -> bool:
    """True when ``node`` maps integer inputs to integers (integer constants and coefficients,
    integer clip bounds, no ``pwl`` unless all its slopes and values are integers)."""

    def whole(v: float) -> bool:
        return float(v).is_integer()

    if isinstance(node, Const):
        return whole(node.value)
    if isinstance(node, Name):
        return True
    if isinstance(node, Linear):
        return whole(node.const) and all(whole(c) and integral(t) for c, t in node.terms)
    assert isinstance(node, Call)
    if node.fn == "pwl":
        xs, ys = _pwl_fn(node.params)
        slopes = np.diff(ys) / np.diff(xs)
        ok = all(whole(v) for v in (*xs, *ys, *slopes))
    else:
        ok = all(whole(v) for v in node.params)
    return ok and all(integral(a) for a in node.args)


def affine_row(node: Node, order: Sequence[str]) -> tuple[np.ndarray, float] | None:
    """``(a, c)`` with ``node = a · x + c`` over the names ``order``, or None when not affine."""
    lin = _as_linear(node)
    a = np.zeros(len(order))
    for coef, t in lin.terms:
        if not isinstance(t, Name) or t.name not in order:
            return None
        a[list(order).index(t.name)] += coef
    return a, lin.const
