"""The 7×7 grid: kernel, model, logging protocol and its JSONL round trip."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks._experiments.gridworld import (
    GridSpec,
    grid_model,
    simulate_logs,
    true_kernel,
    write_logs,
)
from safecert.shield.estimate import estimate
from safecert.shield.logs import iter_steps
from safecert.shield.reach import exact_rows, full_shield, value_iteration


def test_model_matches_the_published_setup():
    model = grid_model(12_000)
    assert model.n_states == 49 and model.unsafe.sum() == 9 and model.live.sum() == 40
    assert model.stochastic_rows == 160 and model.live_pairs == 200
    assert model.n0.max() == int(0.7 * 12_000 * 16 / 160)
    assert model.labels[model.initial] == "r0c0" and model.goal.sum() == 1
    assert model.k.max() == 3


def test_kernel_is_the_slip_model():
    model = grid_model(100)
    probs = true_kernel(model)
    assert np.allclose(probs.sum(-1), 1.0)
    s, right = model.state_index("r0c0"), model.actions.index("right")
    got = {
        model.labels[x]: p
        for x, p in zip(model.successors(s, right), probs[s, right], strict=False)
    }
    assert got == pytest.approx({"r0c1": 0.84, "r0c0": 0.08, "r1c0": 0.08})
    # without a shield the worst controller reaches the hazard almost surely (paper: "about 1")
    exact, _ = value_iteration(exact_rows(model, probs), full_shield(model), model.horizon)
    assert exact[model.initial] > 0.99


def test_protocol_covers_rows_nearly_evenly_and_matches_the_kernel():
    model = grid_model(12_000)
    probs = true_kernel(model)
    est, ids = simulate_logs(model, probs, 12_000, np.random.default_rng(0))
    assert est.steps == 12_000 * 16 and ids > 12_000
    visits = est.visits[model.live][:, :4]
    assert visits.min() >= 0.6 * visits.mean()
    assert est.missed_budget <= 8
    ok = ~est.vacuous & (est.k >= 2)
    assert np.abs(est.p_hat - probs).sum(-1)[ok].max() < 0.15


def test_jsonl_round_trip_gives_the_same_estimates(tmp_path):
    model = grid_model(300, GridSpec())
    probs = true_kernel(model)
    path = tmp_path / "grid.jsonl"
    est = write_logs(model, probs, 300, path, np.random.default_rng(1))
    again = estimate(model, iter_steps(path, model))
    assert (again.counts == est.counts).all() and (again.visits == est.visits).all()
    assert again.steps == 300 * 16


def test_quick_experiment1_adversary_matches_exact_worst_case():
    """Small Experiment 1: the worst admissible controller's simulated unsafe rate equals the
    exact worst case (within 4 standard errors); the others stay below; all below the bound."""
    from benchmarks._experiments.gridworld import adversary, competent, random_controller, rollout
    from safecert.shield.synthesis import synthesize

    model = grid_model(12_000)
    probs = true_kernel(model)
    est, _ = simulate_logs(model, probs, 12_000, np.random.default_rng(21))
    res = synthesize(model, est, 0.10, method="additive")
    exact, _ = value_iteration(exact_rows(model, probs), res.allowed, model.horizon)
    v = exact[model.initial]
    rng = np.random.default_rng(22)
    n = 20_000
    adv = rollout(model, probs, adversary(model, probs, res.allowed), n, rng).mean()
    assert abs(adv - v) <= 4 * np.sqrt(v * (1 - v) / n) and v <= res.bound <= 0.10
    for ctrl in (competent(model, probs, res.allowed), random_controller(model, res.allowed, rng)):
        assert rollout(model, probs, ctrl, n, rng).mean() <= v + 4 * np.sqrt(v / n)


def test_quick_experiment2_true_risk_below_certificate_and_budget():
    from safecert.shield.synthesis import synthesize

    model = grid_model(3_000)
    probs = true_kernel(model)
    exact = exact_rows(model, probs)
    for seed in range(4):
        est, _ = simulate_logs(model, probs, 3_000, np.random.default_rng(100 + seed))
        res = synthesize(model, est, 0.10, method="additive")
        v, _ = value_iteration(exact, res.allowed, model.horizon)
        assert v[model.initial] <= res.bound <= 0.10
