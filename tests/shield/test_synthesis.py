"""Least-restrictive synthesis on the grid: every output meets ε and its claims hold."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks._experiments.gridworld import grid_model, simulate_logs, true_kernel
from safecert.shield.estimate import estimate
from safecert.shield.reach import exact_rows, robust_rows, value_iteration
from safecert.shield.synthesis import (
    all_halt,
    forbidden_fraction,
    goal_reachable,
    reference_occupancy,
    synthesize,
)


@pytest.fixture(scope="module")
def grid():
    model = grid_model(12_000)
    probs = true_kernel(model)
    est, _ = simulate_logs(model, probs, 12_000, np.random.default_rng(3))
    return model, probs, est


@pytest.mark.parametrize("method", ["greedy", "additive", "robust_q"])
def test_output_meets_epsilon_and_is_sound(grid, method):
    model, probs, est = grid
    res = synthesize(model, est, 0.10, method=method)
    rows = robust_rows(model, est)
    robust, _ = value_iteration(rows, res.allowed, model.horizon)
    exact, _ = value_iteration(exact_rows(model, probs), res.allowed, model.horizon)
    assert res.bound == pytest.approx(robust[model.initial]) and res.bound <= 0.10
    assert exact[model.initial] <= res.bound + 1e-12
    assert res.allowed[:, model.halt].all() and not res.fallback_all_halt
    assert res.goal_reachable is True
    live = model.live
    manual = (~res.allowed[live]).sum() / (live.sum() * len(model.actions))
    assert res.forbidden_fraction == pytest.approx(manual) and 0 < manual < 0.5


def test_additive_is_inclusion_maximal(grid):
    model, _, est = grid
    res = synthesize(model, est, 0.10, method="additive")
    rows = robust_rows(model, est)
    back = np.argwhere(~res.allowed & model.live[:, None])
    trials = np.broadcast_to(res.allowed, (len(back),) + res.allowed.shape).copy()
    trials[np.arange(len(back)), back[:, 0], back[:, 1]] = True
    values, _ = value_iteration(rows, trials, model.horizon)
    assert np.all(values[:, model.initial] > 0.10)


def test_greedy_fences_the_hazard_rather_than_the_start(grid):
    """Moves into the hazard from its neighbours go first; the start keeps its moves."""
    model, _, est = grid
    res = synthesize(model, est, 0.10, method="greedy")
    into = sum(any(model.unsafe[x] for x in model.successors(s, a)) for s, a in res.steps[:10])
    assert into >= 4 and res.goal_reachable
    assert res.allowed[model.initial, model.actions.index("right")]  # the route out of s0 stays


def test_no_logs_means_vacuous_rows_and_still_a_valid_shield():
    model = grid_model(12_000)
    est = estimate(model, [])
    assert est.vacuous[model.live].sum() == model.stochastic_rows
    res = synthesize(model, est, 0.05, method="greedy")
    assert res.bound <= 0.05
    # vacuous rows allow any successor: only moves whose K avoids S_u survive near the start
    exact_all_halt, _ = value_iteration(robust_rows(model, est), all_halt(model), model.horizon)
    assert exact_all_halt[model.initial] == 0.0


def test_reference_occupancy_is_goal_directed(grid):
    model, _, est = grid
    rho = reference_occupancy(model, robust_rows(model, est), est)
    assert rho.sum() == pytest.approx(1.0) and (rho[model.unsafe] == 0).all()
    assert rho[model.initial].sum() > 0
    assert np.sort(rho.ravel())[::-1][:20].sum() > 0.75  # a route, not the whole grid


def test_goal_reachability_and_fraction_helpers(grid):
    model, _, est = grid
    rows = robust_rows(model, est)
    assert goal_reachable(model, rows, np.ones(model.k.shape, bool)) is True
    assert goal_reachable(model, rows, all_halt(model)) is False
    assert forbidden_fraction(model, all_halt(model)) == pytest.approx(0.8)


def test_bad_arguments(grid):
    from safecert.errors import ConfigError

    model, _, est = grid
    with pytest.raises(ConfigError, match="method"):
        synthesize(model, est, 0.1, method="magic")
    with pytest.raises(ConfigError, match="epsilon"):
        synthesize(model, est, 1.5)


@pytest.mark.parametrize("method", ["greedy", "additive", "robust_q"])
def test_synthesize_on_given_rows(grid, method):
    """``rows=`` runs the same synthesizer on other sets (the baselines' path): on the true kernel
    the bound is the exact worst case and the shield is no more restrictive than ours."""
    model, probs, est = grid
    rows = exact_rows(model, probs)
    res = synthesize(model, est, 0.10, method=method, rows=rows)
    exact, _ = value_iteration(rows, res.allowed, model.horizon)
    assert res.bound == pytest.approx(exact[model.initial]) and res.bound <= 0.10
    assert res.forbidden_fraction <= synthesize(model, est, 0.10, method=method).forbidden_fraction


def test_goal_reachable_needs_logged_transitions():
    """Without logs nothing was seen: the goal is not reachable through unlogged rows (before,
    vacuous rows contributed their whole K and every shield reached the goal)."""
    model = grid_model(12_000)
    rows = robust_rows(model, estimate(model, []))
    assert goal_reachable(model, rows, np.ones(model.k.shape, bool)) is False
    assert goal_reachable(model, rows, all_halt(model)) is False


def test_goal_reachable_on_the_small_example_log():
    from pathlib import Path

    from safecert.shield.logs import iter_steps
    from safecert.shield.model import load_model

    ex = Path(__file__).resolve().parents[2] / "examples" / "shield"
    model = load_model(ex / "grid.toml")
    est = estimate(model, iter_steps(ex / "grid_logs.jsonl", model))
    assert est.missed_budget > 0  # a small log: some rows are vacuous
    res = synthesize(model, est, 0.2, method="additive")
    assert res.goal_reachable is True
