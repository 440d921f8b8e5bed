"""The typed ``result`` of black-box certificates (kinds ``blackbox`` and ``sequential``).

Every field is required (no defaults): a certificate missing one is malformed, never completed by
a guess. Everything here is recomputed by :mod:`safecert.blackbox.check` from ``parameters``, the
environment and the stored episodes — except estimated ``obs_ranges`` (from a reference policy's
rollouts, kept in the episode store, whose rows digest covers them).

The sequential models are built on their first use (``defer_build``): a fixed-N run never
builds them (issue 28.3: a few milliseconds of every run's start-up).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict

from safecert.document import StrictModel

Level = float | int | bool
CellParams = dict[str, Level]


class Kpi(StrictModel):
    """A Hoeffding bound on an episode statistic at δ' (``bound`` is None when no range is known
    or a value fell outside the declared range: then nothing is claimed)."""

    mean: float
    range: list[float] | None
    side: Literal["lower", "upper"]
    bound: float | None
    outside_range: bool


class _CellCounts(StrictModel):
    """What every judged cell states: its counts, rates, the Table-2 breakdown bounds at δ', and
    the Hoeffding KPI bounds."""

    params: CellParams
    episodes: int
    failures: int
    task_failures: int
    safety_failures: int
    oracle_failures: int
    failure_rate: float
    task_failure_rate: float
    safety_failure_rate: float
    task_upper_bound: float
    safety_upper_bound: float
    return_kpi: Kpi
    cost_kpi: Kpi


class Cell(_CellCounts):
    """One cell of the family judged at fixed N: Clopper–Pearson upper bound at δ', decision."""

    upper_bound: float
    decision: Literal["PASS", "FAIL"]


class Stage1Cell(Cell):
    """The nominal cell (stage 1) and its index in the family."""

    cell: int


class Axis(StrictModel):
    name: str
    levels: list[Level]


class ObsRanges(StrictModel):
    """Per observation dimension: the range noise is scaled by, and where it came from
    (``source``: declared in the config, the space's bounds, or estimated from ``episodes``
    rollouts of ``reference_policy`` — never the policy under test)."""

    low: list[float]
    high: list[float]
    range: list[float]
    estimated: list[bool]
    episodes: int
    source: Literal["declared", "space", "estimated"]
    reference_policy: str | None


class FailureKind(StrictModel):
    """Failed episodes of one kind, with the first reason seen (in store order) as an example."""

    count: int
    example: str


class OracleFailures(StrictModel):
    """Episodes ended by a failure rather than by the environment, grouped by kind:
    ``oracle_call`` (no valid reply), ``action_shape``, ``action_out_of_space``, ``spec``."""

    total: int
    kinds: dict[str, FailureKind]


class Rejudged(StrictModel):
    """A post-hoc judgement: the spec the episodes were run under, and where the store is."""

    budget: float
    p_star: float
    store: str


class _Common(StrictModel):
    confidence: float
    p_star: float
    budget: float
    family_size: int
    delta_cell: float
    odd: list[CellParams]
    axes: list[Axis]
    goal: str
    cost_key: str
    goal_expression: str
    cost_expression: str
    action_out_of_space: Literal["fail", "clip"]
    cost_range: list[float] | None
    return_range: list[float] | None
    obs_ranges: ObsRanges | None
    oracle_failures: OracleFailures
    episodes_per_cell: int
    verdict_rule: str


class BlackboxResult(_Common):
    """Fixed-N certification (``kind = "blackbox"``), possibly re-judged post hoc."""

    stage1: Stage1Cell
    cells: list[Cell]
    rejudged: Rejudged | None


class SequentialCell(_CellCounts):
    """A cell judged by an anytime-valid rule on its first ``episodes_used`` episodes (all it
    stores: ``episodes`` is the same number); Hoeffding bounds over them are descriptive."""

    model_config = ConfigDict(defer_build=True)

    decision: Literal["PASS", "FAIL", "INCONCLUSIVE", "UNDECIDED"]
    lower_bound: float
    upper_bound: float
    episodes_used: int
    failures_used: int


class SequentialStage1(SequentialCell):
    cell: int


class SequentialDecision(StrictModel):
    """A cell's decision: the rule applied to its outcomes in episode-index order; it stopped at
    ``episodes_used`` (the decision point), which is also how many episodes the store holds."""

    model_config = ConfigDict(defer_build=True)

    cell: int
    decision: Literal["PASS", "FAIL", "INCONCLUSIVE", "UNDECIDED"]
    episodes_used: int
    failures_used: int
    lower_bound: float
    upper_bound: float


class SequentialBlock(StrictModel):
    """The rule, each cell's decision and the episode totals. ``order``: the order in which each
    cell's outcomes are read (the index order of their seeds, never completion order), so the
    decision points are a function of the outcomes alone. Overshoot (episodes run past a decision
    point) depends on worker timing, is not evidence, and is not here: the episode store's
    ``sequential_overshoot`` meta holds it."""

    model_config = ConfigDict(defer_build=True)

    method: str
    options: dict[str, Any]
    rule: dict[str, Any]
    delta_cell: float
    cap: int
    order: Literal["episode index"]
    cells: list[SequentialDecision]
    episodes_used: int
    episodes_fixed_n: int
    note: str


class SequentialResult(_Common):
    """Sequential certification (``kind = "sequential"``)."""

    model_config = ConfigDict(defer_build=True)

    stage1: SequentialStage1
    cells: list[SequentialCell]
    sequential: SequentialBlock
