"""Robust and exact value iteration against brute force on tiny random models."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from safecert.shield.estimate import estimate
from safecert.shield.logs import Step
from safecert.shield.model import model_from_dict
from safecert.shield.reach import (
    backup,
    exact_rows,
    full_shield,
    robust_rows,
    value_iteration,
)

from .test_confidence import lp_sigma


def random_model(rng, n=4, m=3, horizon=3, per_row=30):
    """Label-mode model: states s0..s{n-1} plus one unsafe 'bad'; random K(s,a) of size 1-3."""
    labels = [f"s{i}" for i in range(n)] + ["bad"]
    acts = [f"a{j}" for j in range(m - 1)] + ["halt"]
    succ = {
        a: {
            lab: sorted(rng.choice(labels, size=int(rng.integers(1, 4)), replace=False).tolist())
            for lab in labels[:-1]
        }
        for a in acts[:-1]
    }
    model = model_from_dict(
        {
            "states": labels,
            "actions": acts,
            "initial": "s0",
            "unsafe": ["bad"],
            "horizon": horizon,
            "delta": 0.05,
            "budget": {"per_row": per_row},
            "successors": succ,
        }
    )
    probs = np.zeros(model.succ.shape)
    for s in range(model.n_states):
        for a in range(len(acts)):
            k = model.k[s, a]
            probs[s, a, :k] = rng.dirichlet(np.ones(k))
    return model, probs


def sample_steps(model, probs, rng, n_steps):
    """A uniformly random logging controller, restarting at a random live state after halt/harm."""
    live = np.flatnonzero(model.live)
    steps, s, ep, t = [], int(rng.choice(live)), 0, 0
    moves = [a for a in range(len(model.actions)) if a != model.halt]
    for i in range(n_steps):
        a = int(rng.choice(moves))
        j = int(rng.choice(model.k[s, a], p=probs[s, a, : model.k[s, a]]))
        s2 = int(model.succ[s, a, j])
        steps.append(Step(f"e{ep}", t, s, a, s2, j, i + 1))
        s, t = s2, t + 1
        if model.unsafe[s] or t >= model.horizon:
            s, ep, t = int(rng.choice(live)), ep + 1, 0
    return steps


def loop_robust_vi(rows, allowed, horizon):
    """Reference: per-state Python loop with an LP per row."""
    n = rows.n_states
    v = np.zeros(n + 1)
    v[:n][rows.unsafe] = 1
    for _ in range(horizon):
        new = v.copy()
        for s in range(n):
            if rows.unsafe[s]:
                continue
            best = 0.0
            for a in np.flatnonzero(allowed[s]):
                ok = rows.valid[s, a]
                vals, p = v[rows.succ[s, a][ok]], rows.p[s, a][ok]
                r = rows.radius[s, a]
                q = vals.max() if np.isinf(r) else (vals @ p if r == 0 else lp_sigma(vals, p, r))
                best = max(best, q)
            new[s] = best
        v = new
    return v


def brute_force_worst(model, probs, allowed, horizon):
    """Max over all deterministic time-dependent Markov policies of P(reach unsafe by T)."""
    n = model.n_states
    live = [s for s in range(n) if model.live[s]]
    choices = [np.flatnonzero(allowed[s]) for s in live]
    per_step = list(itertools.product(*choices))
    best = 0.0
    for plan in itertools.product(per_step, repeat=horizon):
        dist = np.zeros(n + 1)
        dist[model.initial] = 1
        for decision in plan:
            new = np.zeros(n + 1)
            new[model.sink] += dist[model.sink]
            new[:n][model.unsafe] += dist[:n][model.unsafe]
            for s, a in zip(live, decision, strict=True):
                k = model.k[s, a]
                np.add.at(new, model.succ[s, a, :k], dist[s] * probs[s, a, :k])
            dist = new
        best = max(best, dist[:n][model.unsafe].sum())
    return best


@pytest.mark.parametrize("seed", range(6))
def test_exact_vi_equals_brute_force_over_policies(seed):
    rng = np.random.default_rng(seed)
    model, probs = random_model(rng, n=3, m=3, horizon=2)
    allowed = rng.random(model.k.shape) < 0.7
    values, _ = value_iteration(exact_rows(model, probs), allowed, 2)
    allowed[:, model.halt] = True
    assert values[model.initial] == pytest.approx(brute_force_worst(model, probs, allowed, 2))


@pytest.mark.parametrize("seed", range(6))
def test_robust_vi_equals_lp_loop(seed):
    rng = np.random.default_rng(100 + seed)
    model, probs = random_model(rng, per_row=int(rng.integers(5, 40)))
    est = estimate(model, sample_steps(model, probs, rng, 400))
    rows = robust_rows(model, est)
    allowed = rng.random(model.k.shape) < 0.8
    allowed[:, model.halt] = True
    values, _ = value_iteration(rows, allowed, model.horizon)
    assert np.allclose(values, loop_robust_vi(rows, allowed, model.horizon), atol=1e-7)


def test_certificate_dominates_exact_worst_case_when_event_holds():
    held = 0
    for seed in range(40):
        rng = np.random.default_rng(1000 + seed)
        model, probs = random_model(rng, n=5, m=4, horizon=4, per_row=25)
        est = estimate(model, sample_steps(model, probs, rng, 1500))
        rows = robust_rows(model, est)
        ok = (est.k >= 2) & ~est.vacuous
        event = np.all(np.abs(probs - est.p_hat).sum(-1)[ok] <= rows.radius[ok] + 1e-12)
        if not event:
            continue
        held += 1
        for _ in range(5):
            allowed = rng.random(model.k.shape) < 0.6
            robust, _ = value_iteration(rows, allowed, model.horizon)
            exact, _ = value_iteration(exact_rows(model, probs), allowed, model.horizon)
            assert np.all(robust >= exact - 1e-12)
    assert held >= 30  # δ = 0.05: the event should hold in almost every draw


def test_batched_shields_equal_one_by_one_and_eta_bound():
    rng = np.random.default_rng(5)
    model, probs = random_model(rng, n=5, m=4, horizon=5, per_row=20)
    est = estimate(model, sample_steps(model, probs, rng, 800))
    rows = robust_rows(model, est)
    shields = rng.random((7,) + model.k.shape) < 0.7
    batched, q = value_iteration(rows, shields, model.horizon, keep_q=True)
    assert q.shape == (model.horizon, 7) + model.k.shape
    for i in range(7):
        assert np.allclose(batched[i], value_iteration(rows, shields[i], model.horizon)[0])
    eta = 0.03
    wide, _ = value_iteration(robust_rows(model, est, eta=eta), full_shield(model), model.horizon)
    base, _ = value_iteration(rows, full_shield(model), model.horizon)
    assert np.all(wide >= base - 1e-12) and np.all(wide <= base + model.horizon * eta / 2 + 1e-12)


def test_backup_is_monotone_in_values():
    rng = np.random.default_rng(9)
    model, probs = random_model(rng)
    est = estimate(model, sample_steps(model, probs, rng, 300))
    rows = robust_rows(model, est)
    v = rng.random(model.n_states + 1)
    v[-1] = 0
    assert np.all(backup(rows, v + 0.1 * rng.random(v.shape)) >= backup(rows, v) - 1e-12)
