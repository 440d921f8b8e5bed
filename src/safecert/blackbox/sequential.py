"""Sequential (adaptive) certification of a grid: ``safecert certify --sequential``.

Each cell's episodes are judged in their index order by an anytime-valid rule of
:mod:`safecert.stats.sequential` / :mod:`safecert.stats.betting` at δ' = δ/M (Bonferroni over the
M cells of the family, as in fixed-N). A cell stops at PASS (upper bound ≤ p*), FAIL (lower bound
> p*; for ``curtail``: the fixed-N decision FAIL) or INCONCLUSIVE at the cap (``episodes``).

How a run proceeds (resumable at any point: everything lives in ``episodes.sqlite``):

1. stage 1 (the nominal cell) runs in rounds until decided, then the other cells run together;
2. a round schedules episodes only for undecided cells — episodes that decided cells no longer
   need go to the undecided ones; for ``looks`` a round ends exactly at each cell's next look,
   for per-episode rules at the earliest point where the cell could stop, or a growth step
   (``round_growth``) beyond its current count;
3. each cell's decision is recomputed from the stored records, as the longest prefix of
   contiguous indices 0, 1, 2, … (a killed round leaves holes that the next round fills).

Why the family-wise guarantee survives adaptivity: a cell's decision is a stopping rule on that
cell's own i.i.d. outcomes in a fixed order; when, or whether, the scheduler runs its next
episodes (which depends on other cells) changes only how far along the same sequence it gets,
and every rule is valid uniformly over n. So each cell errs with probability ≤ δ' and the union
bound gives ≤ δ over the grid. Episodes run past a cell's stopping index (a round's overshoot) are
stored and counted in ``episodes`` but do not enter its decision (``episodes_used``).

Hoeffding KPI bounds are computed, as in fixed-N, from all stored episodes of a cell; at a
data-dependent episode count they are descriptive, not anytime-valid (``result.sequential.note``).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from safecert.blackbox.backends import Backend, LocalBackend
from safecert.blackbox.certify import (
    RunPlan,
    build_certificate,
    closing_local,
    make_context,
    open_store,
    plan_run,
    run_jobs,
)
from safecert.blackbox.jobs import EpisodeRecord, make_jobs
from safecert.blackbox.judge import failure_flags
from safecert.blackbox.store import EpisodeStore
from safecert.certificate import Certificate, Check, make_certificate, write_certificate
from safecert.config import parse_model
from safecert.stats.betting import BettingRule
from safecert.stats.sequential import FAIL, PASS, UNDECIDED, Boundaries
from safecert.stats.sequential_plan import make_rule

NOTE = (
    "decisions and bounds are anytime-valid at delta_cell; the Hoeffding KPI bounds and the "
    "task/safety-only bounds use all stored episodes of a cell at a data-dependent count and are "
    "descriptive"
)


class SequentialSettings(BaseModel):
    """The ``[sequential]`` table of the run config (all keys optional)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    method: Literal["mixture", "looks", "betting", "curtail"] = "mixture"
    first_look: int | None = Field(None, ge=1)
    look_ratio: float = Field(1.5, gt=1.0, le=10.0)
    spending: Literal["pi2", "uniform"] = "pi2"
    prior: tuple[float, float] | None = None
    round_growth: float = Field(1.25, gt=1.0, le=10.0)
    min_round: int = Field(8, ge=1)

    def rule_options(self) -> dict[str, Any]:
        if self.method == "looks":
            opts: dict[str, Any] = {"look_ratio": self.look_ratio, "spending": self.spending}
            if self.first_look is not None:
                opts["first_look"] = self.first_look
            return opts
        if self.method == "mixture" and self.prior is not None:
            return {"prior": list(self.prior)}
        return {}


Rule = Boundaries | BettingRule


def outcomes_prefix(records: list[EpisodeRecord], budget: float) -> np.ndarray:
    """Unified-failure outcomes of the contiguous index prefix 0, 1, … of one cell's records."""
    ordered = sorted(records, key=lambda r: r.index)
    n = 0
    while n < len(ordered) and ordered[n].index == n:
        n += 1
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    return failure_flags(ordered[:n], budget)[2].astype(np.int64)


def earliest_stop(rule: Rule, episodes: int, failures: int, *, pass_only: bool = False) -> int:
    """The first check after ``episodes`` at which the cell could possibly stop (with
    ``pass_only``: could PASS, when it still can before the cap)."""
    if not isinstance(rule, Boundaries):
        return min(rule.cap, episodes + 1)
    later = rule.checks > episodes
    n = rule.checks[later]
    possible = failures <= rule.pass_max[later]
    if not (pass_only and possible.any()):
        possible = possible | (failures + (n - episodes) >= rule.fail_min[later])
    return int(n[np.argmax(possible)]) if possible.any() else rule.cap


def round_target(rule: Rule, settings: SequentialSettings, episodes: int, failures: int) -> int:
    """How many episodes (index prefix) the cell should have after the next round."""
    if isinstance(rule, Boundaries) and rule.method == "looks":
        return earliest_stop(rule, episodes, failures)
    grown = max(episodes + settings.min_round, math.ceil(episodes * settings.round_growth))
    # no failure after a first round: the cell is heading for PASS, so run up to the first point
    # where it could pass (a FAIL before that would need a run of failures)
    pass_only = failures == 0 and episodes >= settings.min_round
    return min(rule.cap, max(earliest_stop(rule, episodes, failures, pass_only=pass_only), grown))


def family(plan: RunPlan) -> tuple[list[int], int]:
    """All cells of the family (grid, then a separate stage-1 cell) and its size M."""
    cells = list(range(plan.grid_size))
    if plan.stage1_cell >= plan.grid_size:
        cells.append(plan.stage1_cell)
    return cells, len(cells)


def build_rule(plan: RunPlan, settings: SequentialSettings) -> tuple[Rule, float]:
    spec = plan.config.spec
    delta_cell = (1.0 - spec.confidence) / family(plan)[1]
    rule = make_rule(
        settings.method, spec.p_star, delta_cell, plan.config.episodes, settings.rule_options()
    )
    return rule, delta_cell


def certify_sequential(
    config: Path,
    out_dir: Path,
    backend: Backend | None = None,
    resume: bool = False,
    progress: bool | None = None,
) -> Certificate:
    """Run a sequential certification end to end; returns the certificate written to ``out_dir``."""
    plan = plan_run(config)
    settings = parse_model(SequentialSettings, plan.config.sequential or {}, prefix="sequential")
    rule, delta_cell = build_rule(plan, settings)
    backend = backend or LocalBackend(plan.config.workers)
    if progress is None:
        progress = sys.stderr.isatty()
    cells, _ = family(plan)
    phases = [[plan.stage1_cell], [c for c in cells if c != plan.stage1_cell]]
    budget = plan.config.spec.budget
    rounds = 0
    with open_store(plan, out_dir, resume=resume) as store, closing_local(backend):
        ctx = make_context(plan, store)
        for phase in phases:
            while True:
                jobs = []
                done = store.done()
                for cell in phase:
                    x = outcomes_prefix(store.records(cell), budget)
                    if rule.decide(x).decision != UNDECIDED:
                        continue
                    target = round_target(rule, settings, x.size, int(x.sum()))
                    jobs.extend(make_jobs(plan.config.seed, cell, target, done))
                if not jobs:
                    break
                rounds += 1
                run_jobs(backend, jobs, ctx, store, progress=progress)
        store.set_meta("sequential_rounds", store.get_meta("sequential_rounds", 0) + rounds)
        cert = sequential_certificate(plan, store, rule, settings, delta_cell)
        write_certificate(cert, Path(out_dir) / "certificate.json")
        from safecert.report import write_report

        write_report(cert, store.records(), Path(out_dir), config_path=plan.config_path)
    return cert


def cell_decisions(
    store: EpisodeStore, rule: Rule, cells: list[int], budget: float
) -> dict[int, dict[str, Any]]:
    """Per cell: the rule's decision from the stored prefix (the part ``verify`` recomputes)."""
    out: dict[int, dict[str, Any]] = {}
    for cell in cells:
        records = store.records(cell)
        res = rule.decide(outcomes_prefix(records, budget))
        out[cell] = {
            "cell": cell,
            "decision": res.decision,
            "episodes_used": res.episodes,
            "failures_used": res.failures,
            "episodes_run": len(records),
            "lower_bound": res.lower,
            "upper_bound": res.upper,
        }
    return out


def sequential_verdict(
    stage1: str, decisions: list[str]
) -> Literal["PASS", "FAIL", "INCONCLUSIVE"]:
    """PASS iff stage 1 and every cell pass; FAIL if any of them fails; else INCONCLUSIVE."""
    every = [stage1, *decisions]
    if all(d == PASS for d in every):
        return "PASS"
    return "FAIL" if FAIL in every else "INCONCLUSIVE"


def sequential_certificate(
    plan: RunPlan,
    store: EpisodeStore,
    rule: Rule,
    settings: SequentialSettings,
    delta_cell: float,
) -> Certificate:
    """The fixed-N judgement of the stored episodes, with each cell's decision and bounds
    replaced by the sequential rule's."""
    base = build_certificate(plan, store)
    result = dict(base.result)
    cells, m = family(plan)
    decided = cell_decisions(store, rule, cells, plan.config.spec.budget)

    def merge(cell: dict[str, Any], index: int) -> dict[str, Any]:
        seq = decided[index]
        return {
            **cell,
            "decision": seq["decision"],
            "upper_bound": seq["upper_bound"],
            "lower_bound": seq["lower_bound"],
            "episodes_used": seq["episodes_used"],
            "failures_used": seq["failures_used"],
        }

    result["cells"] = [merge(c, i) for i, c in enumerate(result["cells"])]
    result["stage1"] = merge(result["stage1"], plan.stage1_cell)
    result["odd"] = [c["params"] for c in result["cells"] if c["decision"] == PASS]
    verdict = sequential_verdict(
        result["stage1"]["decision"], [c["decision"] for c in result["cells"]]
    )
    used = sum(d["episodes_used"] for d in decided.values())
    run = sum(d["episodes_run"] for d in decided.values())
    result["verdict_rule"] = (
        "PASS iff stage 1 and every grid cell pass; FAIL if any fails; else INCONCLUSIVE"
    )
    result["sequential"] = {
        "method": settings.method,
        "options": settings.rule_options(),
        "rule": rule.describe(),
        "delta_cell": delta_cell,
        "cap": plan.config.episodes,
        "cells": [decided[c] for c in cells],
        "episodes_used": used,
        "episodes_run": run,
        "episodes_fixed_n": m * plan.config.episodes,
        "settings": settings.model_dump(mode="json"),
        "note": NOTE,
    }
    return make_certificate(
        "blackbox",
        verdict,
        parameters=base.parameters,
        inputs=dict(base.inputs),
        seed=base.seed,
        result=result,
    )


def verify_sequential(cert: Certificate, store: EpisodeStore) -> list[Check]:
    """Recompute every cell's stopping decision from the stored episodes (in index order).

    The rule is rebuilt from the certificate's method, options, p*, cap and δ' (itself checked
    against confidence / M); the counts were checked by the caller.
    """
    res = cert.result
    seq = res["sequential"]
    checks: list[Check] = []
    m = res["family_size"]
    delta_cell = (1.0 - res["confidence"]) / m
    checks.append(
        Check(
            "sequential delta",
            math.isclose(delta_cell, seq["delta_cell"], rel_tol=1e-12),
            f"(1 - {res['confidence']}) / {m} = {delta_cell:.6g}",
        )
    )
    rule = make_rule(seq["method"], res["p_star"], delta_cell, seq["cap"], seq["options"])
    checks.append(
        Check("sequential rule", rule.describe() == seq["rule"], f"method {seq['method']}")
    )
    claimed = {c["cell"]: c for c in seq["cells"]}
    fresh = cell_decisions(store, rule, sorted(claimed), res["budget"])
    for cell, mine in fresh.items():
        theirs = claimed[cell]
        same = all(
            mine[k] == theirs[k]
            for k in ("decision", "episodes_used", "failures_used", "episodes_run")
        ) and all(
            math.isclose(mine[k], theirs[k], rel_tol=1e-9, abs_tol=1e-12)
            for k in ("lower_bound", "upper_bound")
        )
        checks.append(
            Check(
                f"cell {cell} sequential decision",
                same and mine["decision"] != UNDECIDED,
                f"recomputed {mine['decision']} after {mine['episodes_used']} episodes "
                f"({mine['failures_used']} failures), certificate {theirs['decision']} after "
                f"{theirs['episodes_used']}",
            )
        )
    grid = res["cells"]
    stage1 = res["stage1"]
    consistent = (
        all(
            c["decision"] == fresh[i]["decision"] and c["upper_bound"] == fresh[i]["upper_bound"]
            for i, c in enumerate(grid)
        )
        and stage1["decision"] == fresh[stage1["cell"]]["decision"]
    )
    verdict = sequential_verdict(
        fresh[stage1["cell"]]["decision"], [fresh[i]["decision"] for i in range(len(grid))]
    )
    odd = [c["params"] for i, c in enumerate(grid) if fresh[i]["decision"] == PASS]
    checks.append(
        Check(
            "sequential verdict",
            consistent and verdict == cert.verdict and odd == res["odd"],
            f"recomputed verdict {verdict}, certificate {cert.verdict}",
        )
    )
    return checks
