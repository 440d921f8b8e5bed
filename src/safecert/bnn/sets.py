"""State sets of a closed-loop system: boxes, polytopes and finite unions of their intersections.

Every set the engine handles (``X0``, ``X_u``) is a :class:`Region`: a finite union of
:class:`Piece` objects, each the intersection of a box with a polytope ``{A x ≤ b}`` (possibly
without rows). The config's forms map onto it exactly (:func:`region_of` in
:mod:`safecert.bnn.config`):

* a box → one piece; a union of boxes → one piece each;
* a polytope ``{A x ≤ b}`` → one piece whose box is the polytope's bounding box within the
  domain (two LPs per coordinate, widened outward by 1e-9 relative: a superset, and the rows keep
  the piece exact);
* the complement of a box ``[l, h]`` (closed: ``x_i ≤ l_i`` or ``x_i ≥ h_i`` for some ``i``) within
  the domain ``B`` → one box piece per face (``B`` with ``x_i ≥ h_i``, or with ``x_i ≤ l_i``).

In the MILP each piece is one query: its box as the state columns' bounds, its rows as rows
(relaxed by the verifier's margin), so a union is decided piece by piece, exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from safecert.errors import ConfigError


@dataclass(frozen=True)
class Box:
    """Axis-aligned box ``lo ≤ x ≤ hi`` (float64)."""

    lo: np.ndarray
    hi: np.ndarray

    def __init__(self, lo: object, hi: object) -> None:
        object.__setattr__(self, "lo", np.asarray(lo, dtype=np.float64).reshape(-1))
        object.__setattr__(self, "hi", np.asarray(hi, dtype=np.float64).reshape(-1))

    @property
    def dim(self) -> int:
        return int(self.lo.size)

    def contains(self, x: np.ndarray, atol: float = 0.0) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        return np.all((x >= self.lo - atol) & (x <= self.hi + atol), axis=-1)

    def sample(self, rng: np.random.Generator, n: int, integer: bool = False) -> np.ndarray:
        """``n`` uniform samples (uniform over the integer points when ``integer``)."""
        if integer:
            return rng.integers(np.ceil(self.lo), np.floor(self.hi) + 1, size=(n, self.dim)).astype(
                np.float64
            )
        return rng.uniform(self.lo, self.hi, size=(n, self.dim))

    def inside(self, other: Box) -> bool:
        return bool(np.all(self.lo >= other.lo) and np.all(self.hi <= other.hi))


@dataclass(frozen=True)
class Polytope:
    """``{x : A x ≤ b}``."""

    A: np.ndarray
    b: np.ndarray

    def contains(self, x: np.ndarray, atol: float = 0.0) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        return np.all(x @ self.A.T <= self.b + atol, axis=-1)


@dataclass(frozen=True)
class Piece:
    """``box ∩ {A x ≤ b}`` (``rows`` may have no rows)."""

    box: Box
    rows: Polytope

    def contains(self, x: np.ndarray, atol: float = 0.0) -> np.ndarray:
        return self.box.contains(x, atol) & self.rows.contains(x, atol)


@dataclass(frozen=True)
class Region:
    """A finite union of :class:`Piece` objects (module docstring)."""

    pieces: tuple[Piece, ...]

    @property
    def dim(self) -> int:
        return self.pieces[0].box.dim

    def contains(self, x: np.ndarray, atol: float = 0.0) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        return np.any(np.stack([p.contains(x, atol) for p in self.pieces]), axis=0)

    def sample(self, rng: np.random.Generator, n: int, integer: bool = False) -> np.ndarray:
        """``n`` samples: a piece chosen uniformly, then uniform in its box, filtered by its rows
        (at most 64 rounds per piece; a piece with too few points in its box gives fewer)."""
        out: list[np.ndarray] = []
        which = rng.integers(0, len(self.pieces), size=n)
        for k, piece in enumerate(self.pieces):
            need = int(np.sum(which == k))
            got: list[np.ndarray] = []
            for _ in range(64):
                if need <= sum(len(g) for g in got):
                    break
                cand = piece.box.sample(rng, max(4 * need, 16), integer)
                got.append(cand[piece.rows.contains(cand)])
            if need > 0 and got:
                out.append(np.concatenate(got)[:need])
        if not out:
            return np.zeros((0, self.dim))
        return rng.permutation(np.concatenate(out))


def no_rows(dim: int) -> Polytope:
    return Polytope(np.zeros((0, dim)), np.zeros(0))


def box_piece(box: Box) -> Piece:
    return Piece(box, no_rows(box.dim))


def outside_pieces(inner: Box, domain: Box) -> list[Piece]:
    """The closed complement of ``inner``'s interior within ``domain``: one box per face that the
    domain reaches (``x_i ≥ hi_i`` or ``x_i ≤ lo_i``)."""
    pieces: list[Piece] = []
    for i in range(domain.dim):
        if inner.hi[i] <= domain.hi[i]:
            lo = domain.lo.copy()
            lo[i] = max(inner.hi[i], domain.lo[i])
            pieces.append(box_piece(Box(lo, domain.hi)))
        if inner.lo[i] >= domain.lo[i]:
            hi = domain.hi.copy()
            hi[i] = min(inner.lo[i], domain.hi[i])
            pieces.append(box_piece(Box(domain.lo, hi)))
    return pieces


def polytope_piece(poly: Polytope, domain: Box, field: str) -> Piece:
    """``domain ∩ {A x ≤ b}`` with its bounding box from 2n LPs (HiGHS via scipy), widened
    outward by 1e-9 relative (never beyond the domain). An empty intersection is an error."""
    from scipy.optimize import linprog

    n = domain.dim
    lo, hi = domain.lo.copy(), domain.hi.copy()
    bounds = list(zip(domain.lo, domain.hi, strict=True))
    for i in range(n):
        for sign in (1.0, -1.0):
            c = np.zeros(n)
            c[i] = sign
            res = linprog(c, A_ub=poly.A, b_ub=poly.b, bounds=bounds, method="highs")
            if res.status == 2:
                raise ConfigError(
                    "the polytope does not meet the domain",
                    field=field,
                    fix="check the inequalities' directions and the domain",
                )
            if res.status != 0:
                raise ConfigError(f"LP for the bounding box failed ({res.message})", field=field)
            v = float(res.fun) * sign
            pad = 1e-9 * max(1.0, abs(v))
            if sign > 0:
                lo[i] = max(domain.lo[i], v - pad)
            else:
                hi[i] = min(domain.hi[i], v + pad)
    return Piece(Box(lo, hi), poly)


def region(pieces: Sequence[Piece], field: str) -> Region:
    if not pieces:
        raise ConfigError("the set is empty within the domain", field=field, fix="check its bounds")
    return Region(tuple(pieces))
