"""Sequential (adaptive) certification of a grid: ``safecert certify --sequential``.

Each cell's episodes are judged in their index order by an anytime-valid rule of
:mod:`safecert.stats.sequential` / :mod:`safecert.stats.betting` at δ' = δ/M (Bonferroni over the
M cells of the family, as in fixed-N). A cell stops at PASS (upper bound ≤ p*), FAIL (lower bound
> p*; for ``curtail``: the fixed-N decision FAIL) or INCONCLUSIVE at the cap (``episodes``).

How a run proceeds (resumable at any point: everything lives in ``episodes.sqlite``): the
scheduler (:class:`~safecert.blackbox.streaming.CellStreams`) hands out episodes as workers free
up — the nominal cell first, then every undecided cell — and checks each cell's rule every time a
completed episode extends the cell's prefix of consecutive indices 0, 1, 2, …. The first count at
which the rule stops is the cell's decision point; the cell gets no further episode, and at most
workers × batch_size × lockstep of its episodes (those in flight) run past it. The store holds
exactly episodes 0 … τ−1 of each cell (τ its decision point): a function of the outcomes,
whatever the workers, batch size, backend or timing, so equal seeds give equal certificates and
``verify`` requires the stored count to be the τ it re-derives — a row deleted or appended
changes it.
Episodes run past a decision point (the overshoot) are not evidence; their number, which depends
on timing, is a run statistic in the store's ``sequential_overshoot`` meta and the progress
events. A killed run leaves every cell a prefix; ``--resume`` continues each from there.

Why the family-wise guarantee survives adaptivity: a cell's decision is a stopping rule on that
cell's own i.i.d. outcomes in a fixed (index) order; when, or whether, the scheduler runs its
next episodes (which depends on other cells and on timing) changes only how far along the same
sequence it gets, and every rule is valid uniformly over n. So each cell errs with probability
≤ δ' and the union bound gives ≤ δ over the grid.

Hoeffding KPI bounds are computed, as in fixed-N, from all stored episodes of a cell; at a
data-dependent episode count they are descriptive, not anytime-valid (``result.sequential.note``).
"""

from __future__ import annotations

import functools
import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from safecert.blackbox.backends import Backend, LocalBackend, episodes_per_worker
from safecert.blackbox.certify import (
    blackbox_result,
    closing_local,
    make_context,
    open_store,
    run_inputs,
    store_records,
)
from safecert.blackbox.config import RunConfig, certified_parameters
from safecert.blackbox.grid import Family
from safecert.blackbox.jobs import EpisodeRecord
from safecert.blackbox.judge import failure_flags
from safecert.blackbox.plan import plan_run
from safecert.blackbox.progress import Progress, RunTracker, run_events
from safecert.blackbox.result import (
    Cell,
    SequentialBlock,
    SequentialCell,
    SequentialDecision,
    SequentialResult,
    SequentialStage1,
)
from safecert.blackbox.store import EpisodeStore
from safecert.blackbox.streaming import CellStreams, Rule
from safecert.canonical import to_jsonable
from safecert.certificate import (
    Certificate,
    SequentialCertificate,
    make_certificate,
    write_certificate,
)
from safecert.config import parse_model
from safecert.errors import ConfigError
from safecert.stats.sequential import FAIL, PASS
from safecert.stats.sequential import SequentialDecision as StopDecision
from safecert.stats.sequential_plan import make_rule

NOTE = (
    "decisions and bounds are anytime-valid at delta_cell; each cell's evidence is exactly its "
    "episodes before the decision point, in episode-index order; the Hoeffding KPI bounds and the "
    "task/safety-only bounds use them at a data-dependent count and are descriptive; episodes run "
    "past a decision point (at most workers x batch_size per cell) are not evidence: their "
    "number depends on timing and is kept in the store's sequential_overshoot meta"
)


class SequentialSettings(BaseModel):
    """The ``[sequential]`` table of the run config (all keys optional)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    method: Literal["onesided", "mixture", "looks", "betting", "curtail"] = "onesided"
    first_look: int | None = Field(None, ge=1)
    look_ratio: float = Field(1.5, gt=1.0, le=10.0)
    spending: Literal["pi2", "uniform"] = "pi2"
    prior: tuple[float, float] | None = None

    def rule_options(self) -> dict[str, Any]:
        if self.method == "looks":
            opts: dict[str, Any] = {"look_ratio": self.look_ratio, "spending": self.spending}
            if self.first_look is not None:
                opts["first_look"] = self.first_look
            return opts
        if self.method == "mixture" and self.prior is not None:
            return {"prior": list(self.prior)}
        return {}


Decision = Literal["PASS", "FAIL", "INCONCLUSIVE", "UNDECIDED"]


def outcomes_prefix(records: list[EpisodeRecord], budget: float) -> np.ndarray:
    """Unified-failure outcomes of the contiguous index prefix 0, 1, … of one cell's records."""
    ordered = sorted(records, key=lambda r: r.index)
    n = 0
    while n < len(ordered) and ordered[n].index == n:
        n += 1
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    return failure_flags(ordered[:n], budget)[2].astype(np.int64)


def build_rule(config: RunConfig, family: Family, settings: SequentialSettings) -> Rule:
    """The stopping rule of every cell: at δ' of the family, capped at ``episodes`` (built once
    per process for equal arguments: certify and its result builder share it)."""
    options = json.dumps(settings.rule_options(), sort_keys=True)
    return _rule(settings.method, config.spec.p_star, family.delta_cell, config.episodes, options)


@functools.lru_cache(maxsize=8)
def _rule(method: str, p_star: float, delta: float, cap: int, options: str) -> Rule:
    return make_rule(method, p_star, delta, cap, json.loads(options))


def sequential_settings(config: RunConfig) -> SequentialSettings:
    return parse_model(SequentialSettings, config.sequential or {}, prefix="sequential")


def certify_sequential(
    config: Path,
    out_dir: Path,
    backend: Backend | None = None,
    resume: bool = False,
    progress: Progress = None,
    sign_key: Path | None = None,
    base_dir: Path | None = None,
) -> Certificate:
    """Run a sequential certification end to end; returns the certificate written to ``out_dir``
    (the report is the caller's). ``base_dir`` as for :func:`safecert.blackbox.certify.certify`."""
    plan = plan_run(config, base_dir, keep_env=True)
    if (plan.config.lockstep or 1) > 1:
        raise ConfigError(
            f"lockstep = {plan.config.lockstep} in a sequential run: its episodes in flight are "
            "those it may run past a decision, at most workers x batch_size as the certificate says",
            field="lockstep",
            fix="remove lockstep (a sequential run steps one call group at a time) or drop --sequential",
        )
    settings = sequential_settings(plan.config)
    rule = build_rule(plan.config, plan.family, settings)
    backend = backend or LocalBackend(plan.config.workers)
    with (
        run_events(progress) as events,
        open_store(plan, out_dir, resume=resume) as store,
        closing_local(backend),
    ):
        ctx = replace(make_context(plan, store), sequential=True)
        tracker = RunTracker(
            events,
            engine="sequential",
            cells=plan.cells,
            targets=[plan.config.episodes] * len(plan.cells),
            store=store,
            budget=plan.config.spec.budget,
        )
        tracker.start()
        overshoot = dict(store.get_meta("sequential_overshoot", {}))
        per_worker = episodes_per_worker(ctx)
        window = backend.worker_count(ctx) * per_worker

        def decided(cell: int, res: StopDecision, extra: int) -> None:
            tracker.decided(
                cell,
                decision=res.decision,
                episodes=int(res.episodes),
                failures=int(res.failures),
                upper_bound=float(res.upper),
                overshoot=extra,
            )
            if str(cell) not in overshoot:  # not decided by an earlier invocation (resume)
                overshoot[str(cell)] = {"overshoot": extra, "in_flight_bound": window}
                store.set_meta("sequential_overshoot", overshoot)

        streams = CellStreams(
            rule,
            seed=plan.config.seed,
            budget=plan.config.spec.budget,
            stage1=plan.stage1_cell,
            stored=[store.records(c) for c in range(plan.family.size)],
            batch_size=per_worker,
            window=window,
            on_decided=decided,
        )
        store_records(streams.records(backend, ctx), store, progress=tracker)
        verdict, result = sequential_result(
            plan.config,
            plan.family,
            store,
            cost_range=plan.cost_range,
            return_range=plan.return_range,
        )
        cert = make_certificate(
            "sequential",
            verdict,
            parameters=certified_parameters(plan.config),
            inputs=run_inputs(plan, store),
            seed=plan.config.seed,
            result=result,
        )
        assert isinstance(cert, SequentialCertificate)
        write_certificate(cert, Path(out_dir) / "certificate.json", sign_key=sign_key)
        tracker.finish(cert.verdict)
    return cert


def cell_decisions(
    store: EpisodeStore, rule: Rule, cells: list[int], budget: float
) -> dict[int, SequentialDecision]:
    """Per cell: the rule's decision from the stored prefix (the part ``verify`` recomputes)."""
    out: dict[int, SequentialDecision] = {}
    for cell in cells:
        records = store.records(cell)
        res = rule.decide(outcomes_prefix(records, budget))
        out[cell] = SequentialDecision(
            cell=cell,
            decision=cast(Decision, res.decision),
            episodes_used=int(res.episodes),
            failures_used=int(res.failures),
            lower_bound=float(res.lower),
            upper_bound=float(res.upper),
        )
    return out


def sequential_verdict(
    stage1: str, decisions: list[str]
) -> Literal["PASS", "FAIL", "INCONCLUSIVE"]:
    """PASS iff stage 1 and every cell pass; FAIL if any of them fails; else INCONCLUSIVE."""
    every = [stage1, *decisions]
    if all(d == PASS for d in every):
        return "PASS"
    return "FAIL" if FAIL in every else "INCONCLUSIVE"


VERDICT_RULE = "PASS iff stage 1 and every grid cell pass; FAIL if any fails; else INCONCLUSIVE"


def sequential_result(
    config: RunConfig,
    family: Family,
    store: EpisodeStore,
    *,
    cost_range: tuple[float, float] | None,
    return_range: tuple[float, float] | None,
) -> tuple[Literal["PASS", "FAIL", "INCONCLUSIVE"], SequentialResult]:
    """(verdict, result): the fixed-N judgement of the stored episodes with each cell's decision
    and bounds replaced by the sequential rule's. The one builder: certify and verify call it."""
    settings = sequential_settings(config)
    rule = build_rule(config, family, settings)
    _, base = blackbox_result(
        config,
        family,
        store.records(),
        cost_range=cost_range,
        return_range=return_range,
        obs_ranges=store.get_meta("obs_ranges"),
        rejudged=None,
    )
    decided = cell_decisions(store, rule, list(range(family.size)), config.spec.budget)

    def merge(cell: Cell, index: int) -> dict[str, Any]:
        seq = decided[index]
        fields = dict(cell)
        fields.update(
            decision=seq.decision,
            upper_bound=seq.upper_bound,
            lower_bound=seq.lower_bound,
            episodes_used=seq.episodes_used,
            failures_used=seq.failures_used,
        )
        return fields

    cells = [SequentialCell(**merge(c, i)) for i, c in enumerate(base.cells)]
    stage1 = SequentialStage1(**merge(base.stage1, family.stage1))
    verdict = sequential_verdict(stage1.decision, [c.decision for c in cells])
    common = base.model_dump(exclude={"stage1", "cells", "rejudged", "odd", "verdict_rule"})
    result = SequentialResult(
        **{k: getattr(base, k) for k in common},
        stage1=stage1,
        cells=cells,
        odd=[c.params for c in cells if c.decision == PASS],
        verdict_rule=VERDICT_RULE,
        sequential=SequentialBlock(
            method=settings.method,
            options=settings.rule_options(),
            rule=to_jsonable(rule.describe()),
            delta_cell=family.delta_cell,
            cap=config.episodes,
            cells=[decided[c] for c in range(family.size)],
            episodes_used=sum(d.episodes_used for d in decided.values()),
            order="episode index",
            episodes_fixed_n=family.size * config.episodes,
            note=NOTE,
        ),
    )
    return verdict, result
