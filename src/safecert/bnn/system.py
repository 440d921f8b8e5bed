"""Build a :class:`~safecert.bnn.dynamics.System` from the ``[dynamics]`` and ``[sets]`` tables.

Every name, expression, interval and set is checked here, before any work, and each problem is
one :class:`~safecert.errors.ConfigError` naming the dotted key: an unknown variable, a wrong
arity, a non-piecewise-linear expression, a set naming a variable the system does not have or
missing one it has, ``X0`` outside the domain, a non-integer map in an integer system.

The three systems of the BNN-safety paper ship as such tables (``safecert/bnn/data/*.system.toml``,
restated from the published code, see ``data/README.md``): :func:`benchmark_tables` reads them and
:func:`get_benchmark` builds them. ``lds`` uses the paper's ``X0 = ‖x‖∞ ≤ 0.6``; ``lds_x04`` is the
published code's ``0.4``.
"""

from __future__ import annotations

import keyword
from importlib import resources
from typing import Any

import numpy as np

from safecert.bnn.dynamics import Dynamics, System
from safecert.bnn.pwl import CONSTANTS, Const, affine_row, integral, parse
from safecert.bnn.sets import (
    Box,
    Piece,
    Polytope,
    Region,
    box_piece,
    outside_pieces,
    polytope_piece,
    region,
)
from safecert.errors import ConfigError

#: systems shipped with the package (``data/NAME.system.toml``)
SYSTEMS = ("lds", "lds_x04", "pend", "car", "lane", "cartpole", "lane4", "reactor")
_FUNCTIONS = {"clip", "min", "max", "abs", "relu", "pwl"}


def benchmark_tables(name: str) -> dict[str, Any]:
    """``{"system", "dynamics", "sets"}`` of a packaged system (``lds``, ``lds_x04``, ``pend``,
    ``car``)."""
    from safecert.config import read_toml

    if name not in SYSTEMS:
        raise ConfigError(
            f"unknown system {name!r}", field="benchmark", fix=f"use one of {', '.join(SYSTEMS)}"
        )
    ref = resources.files("safecert.bnn").joinpath("data", f"{name}.system.toml")
    with resources.as_file(ref) as path:
        return read_toml(path)


def get_benchmark(name: str) -> System:
    """A packaged system by name; policy names (``lds_all``, …) map to their system."""
    from safecert.bnn.config import DynamicsConfig, SetsConfig
    from safecert.config import parse_model

    tables = benchmark_tables(name.removesuffix("_all") if name.endswith("_all") else name)
    return build_system(
        str(tables["system"]),
        parse_model(DynamicsConfig, tables["dynamics"], prefix="dynamics"),
        parse_model(SetsConfig, tables["sets"], prefix="sets"),
    )


def _check_names(names: list[str], field: str, taken: set[str]) -> None:
    for n in names:
        if not n.isidentifier() or keyword.iskeyword(n) or n in _FUNCTIONS or n in CONSTANTS:
            raise ConfigError(
                f"{n!r} is not a usable name", field=field, fix="use identifiers such as x, v, u"
            )
        if n in taken:
            raise ConfigError(f"{n!r} is declared twice", field=field, fix="use distinct names")
        taken.add(n)


def compile_dynamics(dyn: Any) -> Dynamics:
    """``[dynamics]`` (a :class:`~safecert.bnn.config.DynamicsConfig`) compiled and checked."""
    taken: set[str] = set()
    _check_names(dyn.state, "dynamics.state", taken)
    _check_names(dyn.action, "dynamics.action", taken)
    _check_names(list(dyn.define), "dynamics.define", taken)
    choices = None
    if dyn.choices is not None:
        rows = [[c] if isinstance(c, int | float) else c for c in dyn.choices]
        if len(rows) < 2 or any(len(r) != len(dyn.action) for r in rows):
            raise ConfigError(
                f"{len(rows)} choices of sizes {sorted({len(r) for r in rows})}",
                field="dynamics.choices",
                fix=f"give two or more action vectors of {len(dyn.action)} values",
            )
        choices = np.asarray(rows, dtype=np.float64)
        if not np.all(np.isfinite(choices)) or np.any(np.abs(choices) > 1e12):
            raise ConfigError("non-finite or huge value", field="dynamics.choices")
    known = [*dyn.state, *dyn.action]
    define = []
    for name, text in dyn.define.items():
        define.append((name, parse(text, known, f"dynamics.define.{name}")))
        known.append(name)
    missing = [n for n in dyn.state if n not in dyn.next]
    extra = [n for n in dyn.next if n not in dyn.state]
    if missing or extra:
        raise ConfigError(
            f"missing {missing}, unknown {extra}" if extra else f"missing {missing}",
            field="dynamics.next",
            fix=f"give one expression for each of {dyn.state}",
        )
    nxt = tuple(parse(dyn.next[n], known, f"dynamics.next.{n}") for n in dyn.state)
    out = Dynamics(tuple(dyn.state), tuple(dyn.action), choices, tuple(define), nxt, dyn.integer)
    if dyn.integer:
        _check_integral(out)
    return out


def _check_integral(d: Dynamics) -> None:
    if d.choices is None or not np.all(d.choices == np.round(d.choices)):
        raise ConfigError(
            "an integer system needs integer discrete actions",
            field="dynamics.choices",
            fix="declare integer choices, or set integer = false",
        )
    named = [(f"dynamics.define.{n}", e) for n, e in d.define]
    named += [(f"dynamics.next.{n}", e) for n, e in zip(d.state, d.next, strict=True)]
    for where, node in named:
        if not integral(node):
            raise ConfigError(
                "does not map integers to integers",
                field=where,
                fix="use integer constants and coefficients, or set integer = false",
            )


def _value(v: object, field: str) -> float:
    """An interval end: a number or a constant expression such as ``"-pi/6"``."""
    if isinstance(v, bool):
        raise ConfigError("expected a number", field=field)
    if isinstance(v, int | float):
        node: Any = Const(float(v))
    else:
        node = parse(str(v), [], field)
    if not isinstance(node, Const) or not np.isfinite(node.value) or abs(node.value) > 1e12:
        raise ConfigError(
            f"{v!r} is not a finite constant", field=field, fix="e.g. -0.6 or '-pi/6'"
        )
    return node.value


def box_of(table: dict[str, list[Any]], state: list[str], field: str) -> Box:
    """A box keyed by state names: every variable exactly once, ``[lo, hi]`` with ``lo ≤ hi``."""
    unknown = [k for k in table if k not in state]
    if unknown:
        raise ConfigError(
            f"unknown variable {unknown[0]!r}", field=f"{field}.{unknown[0]}", fix=f"use {state}"
        )
    lo, hi = [], []
    for n in state:
        if n not in table:
            raise ConfigError(
                "is missing", field=f"{field}.{n}", fix="give [lo, hi] for every state variable"
            )
        iv = table[n]
        if len(iv) != 2:
            raise ConfigError(f"got {len(iv)} values", field=f"{field}.{n}", fix="give [lo, hi]")
        a, b = _value(iv[0], f"{field}.{n}"), _value(iv[1], f"{field}.{n}")
        if a > b:
            raise ConfigError(f"lower end {a} > upper end {b}", field=f"{field}.{n}")
        lo.append(a)
        hi.append(b)
    return Box(lo, hi)


def _inequality(text: str, state: list[str], field: str) -> tuple[np.ndarray, float]:
    """``"lhs <= rhs"`` (or ``>=``), both sides affine in the state: the row ``a·x ≤ b``."""
    for op, sign in (("<=", 1.0), (">=", -1.0)):
        if text.count(op) == 1 and text.count("<") + text.count(">") == 1:
            lhs, rhs = text.split(op)
            diff = parse(f"({lhs}) - ({rhs})", state, field, shown=text)
            row = affine_row(diff, state)
            if row is None:
                raise ConfigError(
                    f"{text!r} is not affine in the state", field=field, fix="e.g. 'p - a_x <= 1'"
                )
            a, c = row
            return sign * a, -sign * c
    raise ConfigError(
        f"{text!r} is not one inequality", field=field, fix="write 'lhs <= rhs' or 'lhs >= rhs'"
    )


def region_pieces(spec: Any, state: list[str], domain: Box, field: str) -> list[Piece]:
    """The pieces of one ``SetConfig`` within ``domain`` (see :mod:`safecert.bnn.sets`)."""
    if spec.box is not None:
        b = box_of(spec.box, state, f"{field}.box")
        lo, hi = np.maximum(b.lo, domain.lo), np.minimum(b.hi, domain.hi)
        return [box_piece(Box(lo, hi))] if np.all(lo <= hi) else []
    if spec.outside is not None:
        return outside_pieces(box_of(spec.outside, state, f"{field}.outside"), domain)
    if spec.polytope is not None:
        rows = [
            _inequality(t, state, f"{field}.polytope[{k}]") for k, t in enumerate(spec.polytope)
        ]
        poly = Polytope(np.array([a for a, _ in rows]), np.array([c for _, c in rows]))
        return [polytope_piece(poly, domain, f"{field}.polytope")]
    out: list[Piece] = []
    for k, sub in enumerate(spec.union):
        if sub.union is not None:
            raise ConfigError("a union inside a union", field=f"{field}.union[{k}]", fix="flatten")
        out.extend(region_pieces(sub, state, domain, f"{field}.union[{k}]"))
    return out


def build_system(name: str, dyn: Any, sets: Any) -> System:
    """The :class:`System` of ``[dynamics]`` and ``[sets]`` (module docstring for the checks)."""
    dynamics = compile_dynamics(dyn)
    state = list(dyn.state)
    domain = box_of(sets.domain, state, "sets.domain")
    step_box = domain
    if sets.step_domain is not None:
        step_box = box_of(sets.step_domain, state, "sets.step_domain")
        if not step_box.inside(domain):
            raise ConfigError(
                "is not inside sets.domain", field="sets.step_domain", fix="shrink it"
            )
    initial = region(region_pieces(sets.initial, state, domain, "sets.initial"), "sets.initial")
    _check_inside(sets.initial, state, domain)
    unsafe = region(region_pieces(sets.unsafe, state, domain, "sets.unsafe"), "sets.unsafe")
    if dyn.integer:
        initial = _integer_pieces(initial)
        unsafe = _integer_pieces(unsafe)
    _check_disjoint(initial, unsafe, state, bool(dyn.integer))
    return System(name, dynamics, domain, step_box, initial, unsafe, bool(dyn.integer))


def _check_disjoint(initial: Region, unsafe: Region, state: list[str], integer: bool) -> None:
    """X0 and X_u must be disjoint: an invariant contains X0 and avoids X_u, so where they share a
    (closed-set, integer for integer systems) point nothing can be certified, whatever the
    policy. One feasibility (MI)LP per pair of pieces; the point found is named."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    for i, p in enumerate(initial.pieces):
        for j, q in enumerate(unsafe.pieces):
            lo, hi = np.maximum(p.box.lo, q.box.lo), np.minimum(p.box.hi, q.box.hi)
            if np.any(lo > hi):
                continue
            a = np.vstack([p.rows.A, q.rows.A]).reshape(-1, len(state))
            b = np.concatenate([p.rows.b, q.rows.b])
            cons = [LinearConstraint(a, -np.inf, b)] if a.shape[0] else []
            res = milp(
                np.zeros(len(state)),
                constraints=cons,
                bounds=Bounds(lo, hi),
                integrality=np.full(len(state), 1 if integer else 0),
            )
            if res.status == 0 and res.x is not None:
                x = ", ".join(f"{n} = {v:.4g}" for n, v in zip(state, res.x, strict=True))
                raise ConfigError(
                    f"X0 overlaps X_u (piece {i} of sets.initial and piece {j} of sets.unsafe "
                    f"share the state {x}): no invariant can contain X0 and avoid X_u, whatever "
                    "the policy",
                    field="sets.initial",
                    fix="make sets.initial and sets.unsafe disjoint",
                )


def _check_inside(spec: Any, state: list[str], domain: Box, field: str = "sets.initial") -> None:
    """X0 must lie in the domain (an invariant inside B cannot contain more): boxes directly,
    polytopes by their bounding box over all of space, complements are within B by definition."""
    if spec.box is not None and not box_of(spec.box, state, f"{field}.box").inside(domain):
        raise ConfigError("is not inside sets.domain", field=f"{field}.box", fix="shrink it")
    if spec.polytope is not None:
        big = Box(domain.lo - 1.0 - np.abs(domain.lo), domain.hi + 1.0 + np.abs(domain.hi))
        rows = [
            _inequality(t, state, f"{field}.polytope[{k}]") for k, t in enumerate(spec.polytope)
        ]
        piece = polytope_piece(
            Polytope(np.array([a for a, _ in rows]), np.array([c for _, c in rows])),
            big,
            f"{field}.polytope",
        )
        tol = 1e-7 * (1.0 + np.abs(domain.lo) + np.abs(domain.hi))
        if np.any(piece.box.lo < domain.lo - tol) or np.any(piece.box.hi > domain.hi + tol):
            raise ConfigError(
                "is not inside sets.domain", field=f"{field}.polytope", fix="add bounding rows"
            )
    if spec.union is not None:
        for k, sub in enumerate(spec.union):
            _check_inside(sub, state, domain, f"{field}.union[{k}]")


def _integer_pieces(r: Region) -> Region:
    """Integer states: each piece's box shrunk to its integer points (pieces without any go)."""
    out = []
    for p in r.pieces:
        lo, hi = np.ceil(p.box.lo - 1e-9), np.floor(p.box.hi + 1e-9)
        if np.all(lo <= hi):
            out.append(Piece(Box(lo, hi), p.rows))
    return region(out, "sets")
