"""The visit planner (``safecert shield plan``): following the plan with fresh samples from a
known model reaches ε; ``bound_if_met`` is exactly what ``certify`` gives on logs with the planned
counts at today's frequencies; rows that cannot matter need nothing, and every remaining need is
necessary."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from safecert.shield.certify import certify_shield
from safecert.shield.estimate import estimate
from safecert.shield.logs import iter_steps
from safecert.shield.model import ShieldModel, load_model
from safecert.shield.plan import allocate, plan_shield, plan_visits, projected_estimates
from safecert.shield.reach import full_shield, robust_rows, value_iteration
from tests.conftest import run_cli

#: s0 -go-> {s1, bad}; s1 -go-> {s2, bad}; s1 -alt-> {s2, s1}; z (unreachable) -go-> {s2, bad}
MODEL = """
name = "chain"
states = ["s0", "s1", "s2", "z", "bad"]
actions = ["go", "alt", "halt"]
initial = "s0"
unsafe = ["bad"]
horizon = 3
delta = 0.1
budget = { per_row = 300 }

[successors.go]
s0 = ["s1", "bad"]
s1 = ["s2", "bad"]
s2 = ["s2"]
z = ["s2", "bad"]

[successors.alt]
s0 = ["s0"]
s1 = ["s2", "s1"]
s2 = ["s2"]
z = ["z"]
"""
#: the true kernel: P(bad | s0, go) = 0.04, P(bad | s1, go) = 0.06, alt at s1 stays w.p. 0.3
TRUE = {("s0", "go"): [0.96, 0.04], ("s1", "go"): [0.94, 0.06], ("s1", "alt"): [0.7, 0.3],
        ("z", "go"): [0.5, 0.5]}  # fmt: skip


@pytest.fixture
def model_path(tmp_path: Path) -> Path:
    path = tmp_path / "chain.toml"
    path.write_text(MODEL, encoding="utf-8")
    return path


def write_logs(path: Path, model: ShieldModel, counts: dict, append: bool = False) -> None:
    """One single-step episode per transition: {(state, action): [count per K position]}."""
    mode = "a" if append else "w"
    start = sum(1 for _ in path.open()) if append and path.exists() else 0
    with path.open(mode, encoding="utf-8") as fh:
        i = start
        for (state, action), row in counts.items():
            s, a = model.labels.index(state), model.actions.index(action)
            for j, c in enumerate(row):
                nxt = model.labels[int(model.succ[s, a, j])]
                for _ in range(int(c)):
                    fh.write(json.dumps({"episode": f"e{i}", "t": 0, "state": state,
                                         "action": action, "next_state": nxt}) + "\n")  # fmt: skip
                    i += 1


def draw(rng: np.random.Generator, visits: dict) -> dict:
    """Fresh samples from the true kernel: {(state, action): visits} → counts per K position."""
    return {row: rng.multinomial(n, TRUE[row]) for row, n in visits.items() if n > 0}


def test_following_the_plan_with_fresh_samples_reaches_epsilon(model_path, tmp_path):
    model = load_model(model_path)
    rng = np.random.default_rng(7)
    logs = tmp_path / "logs.jsonl"
    write_logs(logs, model, draw(rng, {row: 60 for row in TRUE}))
    epsilon = 0.2
    first = plan_shield(model_path, logs, epsilon, anytime=True)
    assert first.bound_now > epsilon and first.achievable and first.bound_if_met <= epsilon
    bounds = []
    plan = first
    for _ in range(4):  # re-plan on the grown logs until the certificate meets ε
        need = {(r.state, r.action): r.need for r in plan.rows}
        write_logs(logs, model, draw(rng, need), append=True)
        run = certify_shield(model_path, logs, tmp_path / "cert", epsilon=epsilon, anytime=True)
        bounds.append(run.certificate.result.bound)
        if bounds[-1] <= epsilon:
            break
        plan = plan_shield(model_path, logs, epsilon, anytime=True)
    assert bounds[-1] <= epsilon, bounds
    assert bounds[0] <= epsilon + 0.02, bounds  # the first plan nearly lands on ε
    assert len(bounds) <= 3, bounds


def test_bound_if_met_is_what_certify_gives_on_the_planned_counts(model_path, tmp_path):
    model = load_model(model_path)
    rng = np.random.default_rng(3)
    logs = tmp_path / "logs.jsonl"
    write_logs(logs, model, draw(rng, {("s0", "go"): 40, ("s1", "go"): 25, ("s1", "alt"): 9}))
    for anytime in (True, False):
        plan = plan_shield(model_path, logs, 0.25, anytime=anytime)
        est = estimate(model, iter_steps(logs, model), anytime=anytime)
        target = est.visits.copy()
        for r in plan.rows:
            target[model.labels.index(r.state), model.actions.index(r.action)] += r.need
        projected = projected_estimates(model, est, target)
        # a log holding exactly the projected counts (today's frequencies, rounded) ...
        planned = tmp_path / f"planned-{anytime}.jsonl"
        rows = {
            (model.labels[s], model.actions[a]): projected.counts[s, a, : model.k[s, a]]
            for s, a in np.argwhere(model.k >= 2)
            if not model.unsafe[s]
        }
        write_logs(planned, model, rows)
        run = certify_shield(model_path, planned, tmp_path / f"c{anytime}", anytime=anytime)
        # ... certifies exactly the promised bound
        assert run.certificate.result.bound == plan.bound_if_met
        assert plan.bound_if_met <= 0.25 < plan.bound_now
        got = {(r.state, r.action): (r.have, r.need) for r in plan.rows}
        # the unreachable state z and the halt/deterministic rows need nothing
        assert got[("z", "go")] == (0, 0)
        assert all(r.action != "halt" for r in plan.rows)
        if not anytime:  # committed sets: a row can need at most its budget's remainder
            assert all(have + need in (have, 300) for have, need in got.values())


def test_every_remaining_need_is_necessary(model_path, tmp_path):
    """Pruning: giving any single row back its need 0 breaks ε (V̄ is monotone in the visits)."""
    model = load_model(model_path)
    logs = tmp_path / "logs.jsonl"
    write_logs(logs, model, draw(np.random.default_rng(5), {row: 30 for row in TRUE}))
    est = estimate(model, iter_steps(logs, model), anytime=True)
    allowed = full_shield(model)
    plan = plan_visits(model, est, allowed, 0.25)
    assert plan.achievable
    target = est.visits.copy()
    for r in plan.rows:
        target[model.labels.index(r.state), model.actions.index(r.action)] += r.need
    needed = [r for r in plan.rows if r.need > 0]
    assert needed
    for r in needed:
        trial = target.copy()
        s, a = model.labels.index(r.state), model.actions.index(r.action)
        trial[s, a] = r.have
        rows = robust_rows(model, projected_estimates(model, est, trial))
        assert value_iteration(rows, allowed, model.horizon)[0][model.initial] > 0.25


def test_out_of_reach_and_already_met(model_path, tmp_path):
    model = load_model(model_path)
    logs = tmp_path / "logs.jsonl"
    write_logs(logs, model, draw(np.random.default_rng(1), {row: 2000 for row in TRUE}))
    # even the true kernel has V ≈ 0.1 under the full shield: ε = 0.01 is out of reach
    low = plan_shield(model_path, logs, 0.01, anytime=True)
    assert not low.achievable and all(r.need == 0 for r in low.rows)
    assert 0.05 < low.bound_limit < low.bound_now
    high = plan_shield(model_path, logs, 0.9, anytime=True)
    assert high.achievable and high.bound_if_met == high.bound_now <= 0.9
    assert all(r.need == 0 for r in high.rows)


def test_allocate_keeps_totals_and_frequencies():
    p = np.array([[0.5, 0.5, 0.0], [1 / 3, 1 / 3, 1 / 3], [0.96, 0.04, 0.0]])
    got = allocate(p, np.array([7, 10, 1001]))
    assert got.sum(axis=1).tolist() == [7, 10, 1001]
    assert np.all(np.abs(got - p * np.array([[7], [10], [1001]])) < 1)
    assert got[0, 2] == 0


def test_cli_plan_json_and_errors(model_path, tmp_path):
    model = load_model(model_path)
    logs = tmp_path / "logs.jsonl"
    write_logs(logs, model, draw(np.random.default_rng(2), {row: 50 for row in TRUE}))
    res = run_cli("shield", "plan", "--model", model_path, "--logs", logs, "--epsilon", "0.2",
                  "--anytime", "--json")  # fmt: skip
    assert res.code == 0, res.stderr
    data = res.json()
    assert {"epsilon", "bound_now", "bound_if_met", "rows"} <= set(data)
    assert data["epsilon"] == 0.2 and data["bound_if_met"] <= 0.2 < data["bound_now"]
    assert {"state", "action", "have", "need"} <= set(data["rows"][0])
    assert {r["state"] for r in data["rows"]} <= {"s0", "s1", "s2", "z"}  # as in the logs
    human = run_cli("shield", "plan", "--model", model_path, "--logs", logs, "--epsilon", "0.2",
                    "--anytime")  # fmt: skip
    assert human.code == 0 and "need" in human.stdout and "if met" in human.stdout
    bad = run_cli("shield", "plan", "--model", model_path, "--logs", logs, "--epsilon", "2")
    assert bad.code == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "--epsilon" in bad.stderr
    out_of_reach = run_cli("shield", "plan", "--model", model_path, "--logs", logs,
                           "--epsilon", "0.001", "--anytime")  # fmt: skip
    assert out_of_reach.code == 1 and "out of reach" in out_of_reach.stderr
