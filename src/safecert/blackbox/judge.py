"""Judging stored episodes: counts, bounds and decisions (docs/methods.md §2). Pure functions.

Per episode τ (budget d on cumulative cost):

    task failure     ¬Goal(τ)              (an oracle failure counts here: the task was not done)
    safety failure   cost(τ) > d
    unified failure  F(τ) = ¬Goal(τ) ∨ cost(τ) > d

Per cell of the :class:`~safecert.blackbox.grid.Family`, with δ' = δ / M (Bonferroni over the M cells of the family): the Clopper–Pearson upper
bound on P(F) (and, for the Table-2 breakdown, on the task-only and safety-only rates), decision
PASS iff upper(k_F, N, δ') ≤ p*; Hoeffding LCB on the return and UCB on the cost, each at δ'
(as the paper's Table B.7 does), from the declared (or derived) ranges; a KPI with no range, or with
values outside its range, gets ``None`` (no guarantee is claimed).

:func:`judge_cell` is the one code path shared by fixed-N certification, rejudging, sequential
certification (BB-seq) and ``safecert verify``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from safecert.blackbox.grid import Family
from safecert.blackbox.jobs import EpisodeRecord
from safecert.blackbox.result import Cell, Kpi, Stage1Cell
from safecert.stats import cp_upper, hoeffding_lcb, hoeffding_ucb

Range = tuple[float, float]


def failure_flags(
    records: Sequence[EpisodeRecord], budget: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(task, safety, unified) boolean arrays over ``records``."""
    task = np.array([not r.goal for r in records], dtype=bool)
    safety = np.array([r.cost > budget for r in records], dtype=bool)
    return task, safety, task | safety


def _kpi(values: np.ndarray, rng: Range | None, delta: float, side: str) -> Kpi:
    inside = rng is not None and values.min() >= rng[0] and values.max() <= rng[1]
    bound = None
    if rng is not None and inside:
        fn = hoeffding_lcb if side == "lower" else hoeffding_ucb
        bound = float(fn(values, delta, rng[0], rng[1]).value)
    return Kpi(
        mean=float(values.mean()),
        range=None if rng is None else [float(rng[0]), float(rng[1])],
        side="lower" if side == "lower" else "upper",
        bound=bound,
        outside_range=rng is not None and not inside,
    )


def judge_cell(
    records: Sequence[EpisodeRecord],
    *,
    params: dict[str, Any],
    budget: float,
    p_star: float,
    delta_cell: float,
    return_range: Range | None,
    cost_range: Range | None,
) -> Cell:
    """One cell: counts, the Table-2 breakdown, bounds at δ' and the decision."""
    n = len(records)
    if n == 0:
        raise ValueError("a cell needs at least one episode")
    task, safety, unified = failure_flags(records, budget)
    k, kt, ks = int(unified.sum()), int(task.sum()), int(safety.sum())
    upper = float(cp_upper(k, n, delta_cell).value)
    return Cell(
        params=dict(params),
        episodes=n,
        failures=k,
        task_failures=kt,
        safety_failures=ks,
        oracle_failures=sum(r.failure_reason is not None for r in records),
        failure_rate=k / n,
        task_failure_rate=kt / n,
        safety_failure_rate=ks / n,
        upper_bound=upper,
        task_upper_bound=float(cp_upper(kt, n, delta_cell).value),
        safety_upper_bound=float(cp_upper(ks, n, delta_cell).value),
        decision="PASS" if upper <= p_star else "FAIL",
        return_kpi=_kpi(np.array([r.ret for r in records]), return_range, delta_cell, "lower"),
        cost_kpi=_kpi(np.array([r.cost for r in records]), cost_range, delta_cell, "upper"),
    )


def verdict(stage1: Cell, cells: Sequence[Cell]) -> Literal["PASS", "FAIL"]:
    """PASS iff the stage-1 nominal gate passes and every grid cell passes; else FAIL."""
    return (
        "PASS" if stage1.decision == "PASS" and all(c.decision == "PASS" for c in cells) else "FAIL"
    )


@dataclass(frozen=True)
class Judgement:
    """A whole run judged: the grid cells, the stage-1 cell, the ODD and the verdict."""

    cells: list[Cell]
    stage1: Stage1Cell
    odd: list[dict[str, Any]]
    verdict: Literal["PASS", "FAIL"]


def judge_run(
    by_cell: Mapping[int, Sequence[EpisodeRecord]],
    family: Family,
    *,
    budget: float,
    p_star: float,
    return_range: Range | None,
    cost_range: Range | None,
) -> Judgement:
    """Judge every member of ``family`` at its δ' from the records of each cell."""
    delta_cell = family.delta_cell

    def one(index: int) -> Cell:
        return judge_cell(
            by_cell.get(index, ()),
            params=family.cells[index],
            budget=budget,
            p_star=p_star,
            delta_cell=delta_cell,
            return_range=return_range,
            cost_range=cost_range,
        )

    judged = [one(i) for i in range(family.grid_size)]
    first = judged[family.stage1] if not family.separate_stage1 else one(family.stage1)
    stage1 = Stage1Cell(**dict(first), cell=family.stage1)
    return Judgement(
        judged, stage1, [c.params for c in judged if c.decision == "PASS"], verdict(stage1, judged)
    )
