"""Counts, bounds and decisions against independent computations and the paper's numbers."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import beta

from safecert.blackbox.grid import Family
from safecert.blackbox.jobs import EpisodeRecord
from safecert.blackbox.judge import judge_cell, judge_run


def _records(goals, costs, rets=None, cell=0):
    rets = rets if rets is not None else [0.0] * len(goals)
    return [
        EpisodeRecord(cell, i, i, float(r), float(c), bool(g), not g, g, 10, None)
        for i, (g, c, r) in enumerate(zip(goals, costs, rets, strict=True))
    ]


def test_counts_match_brute_force_and_bounds_match_scipy():
    rng = np.random.default_rng(0)
    goals = rng.random(300) > 0.1
    costs = rng.exponential(40.0, 300)
    cell = judge_cell(
        _records(goals, costs),
        params={"obs_noise": 0.1},
        budget=100.0,
        p_star=0.3,
        delta_cell=0.1 / 9,
        return_range=(-1.0, 1.0),
        cost_range=None,
    )
    task = int((~goals).sum())
    safety = int((costs > 100).sum())
    unified = int(((~goals) | (costs > 100)).sum())
    assert (cell.task_failures, cell.safety_failures, cell.failures) == (
        task,
        safety,
        unified,
    )
    assert cell.upper_bound == pytest.approx(
        beta.ppf(1 - 0.1 / 9, unified + 1, 300 - unified), rel=1e-12
    )
    assert cell.task_upper_bound == pytest.approx(
        beta.ppf(1 - 0.1 / 9, task + 1, 300 - task), rel=1e-12
    )
    assert cell.decision == ("PASS" if cell.upper_bound <= 0.3 else "FAIL")
    assert cell.cost_kpi.bound is None  # no range declared: no claim


@pytest.mark.parametrize("k, expected", [(81, 0.0104), (460, 0.0510), (1952, 0.2044)])
def test_paper_table2_bonferroni_bounds(k, expected):
    goals = [False] * k + [True] * (10_000 - k)
    cell = judge_cell(
        _records(goals, [0.0] * 10_000),
        params={},
        budget=100.0,
        p_star=0.05,
        delta_cell=0.1 / 9,
        return_range=None,
        cost_range=None,
    )
    assert cell.upper_bound == pytest.approx(expected, abs=5e-5)


def test_paper_table_b7_hoeffding_bounds():
    n = 10_000
    cell = judge_cell(
        _records([True] * n, [28.88] * n, [23.35] * n),
        params={},
        budget=100.0,
        p_star=0.05,
        delta_cell=0.1 / 9,
        return_range=(-10_000.0, 10_000.0),
        cost_range=(0.0, 1000.0),
    )
    assert cell.return_kpi.bound == pytest.approx(-276.64, abs=0.01)
    assert cell.cost_kpi.bound == pytest.approx(43.88, abs=0.01)


def test_unified_failure_rejects_safe_by_dying_and_succeeding_unsafely():
    # half the episodes die early at zero cost, the other half succeed while over budget
    recs = _records([False, True] * 50, [0.0, 500.0] * 50)
    cell = judge_cell(
        recs,
        params={},
        budget=100.0,
        p_star=0.6,
        delta_cell=0.1,
        return_range=None,
        cost_range=None,
    )
    assert cell.task_failure_rate == 0.5 and cell.safety_failure_rate == 0.5
    assert cell.failure_rate == 1.0 and cell.decision == "FAIL"


def test_stage1_inside_grid_and_separate():
    good = _records([True] * 80, [0.0] * 80)
    bad = _records([False] * 30 + [True] * 30, [0.0] * 60, cell=1)
    by_cell = {0: good, 1: bad}
    inside_family = Family(({"obs_noise": 0.0}, {"obs_noise": 0.1}), 2, 0, 0.9)
    inside = judge_run(
        by_cell, inside_family, budget=1.0, p_star=0.05, return_range=None, cost_range=None
    )
    assert inside_family.size == 2 and inside_family.delta_cell == pytest.approx(0.05)
    assert inside.stage1.decision == "PASS" and inside.verdict == "FAIL"
    assert inside.odd == [{"obs_noise": 0.0}]
    separate_family = Family(
        ({"obs_noise": 0.1}, {"obs_noise": 0.2}, {"obs_noise": 0.0}), 2, 2, 0.9
    )
    separate = judge_run(
        {0: bad, 1: good, 2: good},
        separate_family,
        budget=1.0,
        p_star=0.05,
        return_range=None,
        cost_range=None,
    )
    assert separate_family.size == 3 and separate.stage1.cell == 2
    assert separate.odd == [{"obs_noise": 0.2}]


def test_family_from_envelope_matches_bonferroni():
    from safecert.blackbox.config import Envelope

    env = Envelope.model_validate(
        {"obs_noise": {"levels": [0.1, 0.2]}, "delay": {"levels": [0, 1]}}
    )
    fam = Family.of(env, 0.9)
    assert fam.grid_size == 4 and fam.size == 5 and fam.separate_stage1
    assert fam.cells[fam.stage1] == {"obs_noise": 0.0, "delay": 0}
    assert fam.delta_cell == pytest.approx(0.1 / 5, rel=1e-15)
    with_nominal = Family.of(Envelope.model_validate({"obs_noise": {"levels": [0.0, 0.2]}}), 0.9)
    assert with_nominal.size == 2 and with_nominal.stage1 == 0 and not with_nominal.separate_stage1
