"""The certification grid: the Cartesian product of the envelope's listed levels.

Axes (in this order, only those the config lists): ``obs_noise``, ``act_noise``, ``delay``,
``mass``, ``friction``, ``damping``, ``random_dynamics``, ``layout``. A cell is a dict
``{axis: level}``. The nominal value of each axis (no perturbation) is 0 / 1.0 for the scales /
``False`` for layout; the *nominal cell* (stage 1, docs/methods.md §2) has every axis at its nominal value.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from safecert.blackbox.config import Envelope
from safecert.stats import bonferroni

NOMINAL: dict[str, Any] = {
    "obs_noise": 0.0,
    "act_noise": 0.0,
    "delay": 0,
    "mass": 1.0,
    "friction": 1.0,
    "damping": 1.0,
    "random_dynamics": 0.0,
    "layout": False,
}


@dataclass(frozen=True)
class Axis:
    name: str
    levels: tuple[Any, ...]

    @property
    def nominal(self) -> Any:
        return NOMINAL[self.name]


def axes(envelope: Envelope) -> list[Axis]:
    """The grid's axes, in canonical order, with their levels as listed (duplicates removed)."""
    found: list[Axis] = []
    for name in ("obs_noise", "act_noise", "delay"):
        axis = getattr(envelope, name)
        if axis is not None:
            found.append(Axis(name, tuple(dict.fromkeys(axis.levels))))
    if envelope.dynamics is not None:
        for name in ("mass", "friction", "damping"):
            levels = getattr(envelope.dynamics, name)
            if levels is not None:
                found.append(Axis(name, tuple(dict.fromkeys(levels))))
    for name in ("random_dynamics", "layout"):
        axis = getattr(envelope, name)
        if axis is not None:
            found.append(Axis(name, tuple(dict.fromkeys(axis.levels))))
    return found


def grid_cells(envelope: Envelope) -> list[dict[str, Any]]:
    """Every cell of the grid (row-major over :func:`axes`); one empty cell for an empty envelope."""
    ax = axes(envelope)
    return [
        dict(zip([a.name for a in ax], combo, strict=True))
        for combo in itertools.product(*[a.levels for a in ax])
    ]


def nominal_cell(envelope: Envelope) -> dict[str, Any]:
    """The stage-1 cell: every listed axis at its nominal value."""
    return {a.name: a.nominal for a in axes(envelope)}


def is_nominal(params: dict[str, Any]) -> bool:
    return all(NOMINAL[k] == v for k, v in params.items())


def cell_label(params: dict[str, Any]) -> str:
    """Short human label, e.g. ``obs_noise=0.05, delay=1`` (``nominal`` when unperturbed)."""
    if not params or is_nominal(params):
        return "nominal"
    return ", ".join(f"{k}={v}" for k, v in params.items())


@dataclass(frozen=True)
class Family:
    """The family of cells certified together, and its per-cell error level.

    ``cells`` are the grid cells (row-major, indices ``0 … grid_size-1``), then — when the grid
    holds no nominal cell — the separate stage-1 nominal cell (index ``grid_size``), which joins
    the family. ``stage1`` is the nominal cell's index. With M = ``size`` members, each cell is
    judged at δ' = (1 − confidence) / M (Bonferroni), so all M statements hold simultaneously
    with probability ≥ ``confidence`` (docs/methods.md §2).
    """

    cells: tuple[dict[str, Any], ...]
    grid_size: int
    stage1: int
    confidence: float

    @classmethod
    def of(cls, envelope: Envelope, confidence: float) -> Family:
        """The family a config's envelope defines (the one function every caller uses)."""
        grid = grid_cells(envelope)
        nominal = [i for i, c in enumerate(grid) if is_nominal(c)]
        if nominal:
            return cls(tuple(grid), len(grid), nominal[0], confidence)
        return cls(tuple([*grid, nominal_cell(envelope)]), len(grid), len(grid), confidence)

    @property
    def size(self) -> int:
        """M: every member judged at δ'."""
        return len(self.cells)

    @property
    def delta_cell(self) -> float:
        """δ' = (1 − confidence) / M."""
        return bonferroni(1.0 - self.confidence, self.size)

    @property
    def grid(self) -> tuple[dict[str, Any], ...]:
        return self.cells[: self.grid_size]

    @property
    def separate_stage1(self) -> bool:
        return self.stage1 >= self.grid_size
