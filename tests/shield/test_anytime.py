"""Anytime (time-uniform) row confidence sets: closed form, coverage over growing logs, CLI and
verify, and goal reachability that needs logged transitions."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from safecert.errors import ConfigError
from safecert.shield.confidence import anytime_beta
from safecert.shield.estimate import RowCounter, estimate
from safecert.shield.model import model_from_dict
from safecert.shield.reach import exact_rows, full_shield, robust_rows, value_iteration
from safecert.shield.synthesis import goal_route


def random_model(rng: np.random.Generator, n: int = 6, m: int = 3, delta: float = 0.1):
    """A label-mode model: states s0..s{n-1} plus unsafe 'bad', m actions + halt, each row with a
    random K of 2–3 successors (bad possible); returns (model, true kernel)."""
    states = [f"s{i}" for i in range(n)] + ["bad"]
    actions = [f"a{j}" for j in range(m)] + ["halt"]
    succ: dict = {}
    for j in range(m):
        table = {}
        for i in range(n):
            k = int(rng.integers(2, 4))
            table[f"s{i}"] = list(rng.choice(states, size=k, replace=False))
        succ[f"a{j}"] = table
    spec = {"states": states, "actions": actions, "initial": "s0", "unsafe": ["bad"],
            "horizon": 5, "delta": delta, "anytime": True, "successors": succ}  # fmt: skip
    model = model_from_dict(spec)
    probs = np.zeros(model.succ.shape)
    for s in range(model.n_states):
        for a in range(len(actions)):
            k = int(model.k[s, a])
            probs[s, a, :k] = rng.dirichlet(np.full(k, 0.7)) if k > 1 else 1.0
    return model, probs


def test_anytime_beta_closed_form():
    """2·min_j(L_j/(λ_j n) + λ_j/8) with L_j = ln(R(2^k − 2)/δ) + ln((j+1)(j+2)), by hand."""
    n, k, rows, delta = 250, 3, 40, 0.05
    base = math.log(rows * (2**k - 2) / delta)
    best = min(
        (base + math.log((j + 1) * (j + 2))) / (lam * n) + lam / 8
        for j in range(60)
        for lam in [math.sqrt(8 * (base + math.log((j + 1) * (j + 2))) / (3.0**j * math.sqrt(3)))]
    )
    got = anytime_beta(np.array([n, 0, 9]), np.array([k, k, 1]), rows, delta)
    assert got[0] == pytest.approx(2 * best, rel=1e-12)
    assert np.isinf(got[1]) and got[2] == 0.0


def _grow(model, probs, rng, checkpoints, episodes_per_chunk=20):
    """A growing closed-loop log (the logger prefers actions that went well, so visits are
    adaptive); yields the anytime estimates at each checkpoint of total steps."""
    m = len(model.actions)
    counter = RowCounter(model, anytime=True)
    score = np.ones(model.k.shape)
    done = 0
    for target in checkpoints:
        rows, pos = [], []
        while done + len(rows) < target:
            s = model.initial
            for _ in range(model.horizon):
                if model.unsafe[s]:
                    break
                w = score[s, :-1] / score[s, :-1].sum()
                a = int(rng.choice(m - 1, p=w))
                j = int(rng.choice(int(model.k[s, a]), p=probs[s, a, : model.k[s, a]]))
                s2 = int(model.succ[s, a, j])
                score[s, a] = np.clip(score[s, a] * (0.9 if model.unsafe[s2] else 1.05), 0.05, 20)
                rows.append(s * m + a)
                pos.append(j)
                s = s2
        counter.add(np.array(rows, np.int64), np.array(pos, np.int64))
        done += len(rows)
        yield counter.result(episodes=0)


def test_coverage_over_random_models_and_growing_logs():
    """Over 25 random models, each certified at 8 sizes of the same growing closed-loop log:
    the fraction of logs where *ever* some true row leaves its set is ≤ δ, and so is the
    fraction where the certificate is ever below the exact worst-case value (benchmarks/
    shield_anytime.py runs 300 models)."""
    rng = np.random.default_rng(11)
    delta, models = 0.1, 25
    checkpoints = np.unique(np.geomspace(20, 4_000, 8).astype(int))
    rows_out = bound_below = 0
    for _ in range(models):
        model, probs = random_model(rng, delta=delta)
        truth = value_iteration(exact_rows(model, probs), full_shield(model), model.horizon)[0]
        out = below = False
        for est in _grow(model, probs, rng, checkpoints):
            rows = robust_rows(model, est)
            dist = np.abs(probs - est.p_hat).sum(-1)
            sto = (model.k >= 2) & ~est.vacuous
            out |= bool((dist[sto] > rows.radius[sto]).any())
            bound = value_iteration(rows, full_shield(model), model.horizon)[0][model.initial]
            below |= bool(bound < truth[model.initial] - 1e-12)
        rows_out += out
        bound_below += below
    assert rows_out / models <= delta and bound_below / models <= delta


def test_sets_shrink_as_logs_grow_and_use_every_visit(tmp_path):
    rng = np.random.default_rng(2)
    model, probs = random_model(rng)
    ests = list(_grow(model, probs, rng, [200, 2000, 20000]))
    radii = [robust_rows(model, e).radius[(model.k >= 2) & (e.visits > 0)] for e in ests]
    assert (
        np.all(radii[1] <= radii[0][: len(radii[1])] + 1e-12) or radii[1].mean() < radii[0].mean()
    )
    last = ests[-1]
    assert (last.counts.sum(-1)[model.k >= 2] == last.visits[model.k >= 2]).all()
    assert (last.n0 == np.where(model.k >= 2, last.visits, 0)).all()


def test_committed_needs_a_budget_anytime_does_not():
    model, _ = random_model(np.random.default_rng(0))  # anytime = true, no budget
    assert estimate(model, [], anytime=True).missed_budget == int((model.k >= 2).sum())
    with pytest.raises(ConfigError, match="budget"):
        estimate(model, [])


def _write_model_and_logs(tmp_path, anytime_key: bool):
    """The payments-like task: 'lookup' then 'pay' reaches the goal; 'wire' may cause harm."""
    spec = """
states = ["start", "found", "paid", "harm"]
actions = ["lookup", "pay", "wire", "halt"]
initial = "start"
unsafe = ["harm"]
goal = ["paid"]
horizon = 4
delta = 0.05
%s
[successors.lookup]
"*" = ["start", "found"]
[successors.pay]
"*" = ["found", "paid"]
[successors.wire]
"*" = ["paid", "harm", "start"]
""" % ("anytime = true" if anytime_key else "budget = { per_row = 50 }")
    (tmp_path / "m.toml").write_text(spec)
    rng = np.random.default_rng(5)
    lines = []
    for e in range(300):
        t, s = 0, "start"
        for _ in range(3):
            if s == "start":
                a, s2 = "lookup", ("found" if rng.random() < 0.9 else "start")
            elif s == "found":
                a, s2 = "pay", ("paid" if rng.random() < 0.95 else "found")
            else:
                break
            lines.append({"episode": f"e{e}", "t": t, "state": s, "action": a, "next_state": s2})
            s, t = s2, t + 1
        lines.append({"episode": f"e{e}", "t": t, "state": s, "action": "halt"})
    (tmp_path / "l.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return tmp_path / "m.toml", tmp_path / "l.jsonl"


def test_cli_anytime_certify_verifies_and_forgery_fails(tmp_path, monkeypatch):

    monkeypatch.chdir(tmp_path)
    model, logs = _write_model_and_logs(tmp_path, anytime_key=False)
    from safecert.shield.certify import certify_shield

    committed = certify_shield(model, logs, tmp_path / "c").certificate
    anytime = certify_shield(model, logs, tmp_path / "a", anytime=True).certificate
    assert committed.result.confidence == "committed" and anytime.result.confidence == "anytime"
    assert anytime.parameters["anytime"] is True
    # every visit used: the anytime rows carry all visits, the committed ones 50
    assert all(r.n0 == r.visits for r in anytime.result.rows)
    busy = [r for r in anytime.result.rows if r.visits > 200]
    committed_beta = {(r.state, r.action): r.beta for r in committed.result.rows}
    assert busy and all(r.beta < committed_beta[(r.state, r.action)] for r in busy)
    from safecert.audit import Evidence
    from safecert.certificate import read_certificate
    from safecert.shield.check import check

    def verify(folder):
        cert = read_certificate(folder / "certificate.json")
        return check(cert, Evidence(certificate_path=folder / "certificate.json"))

    assert verify(tmp_path / "a").ok and verify(tmp_path / "c").ok
    # flip the switch in parameters: the re-derived result differs
    path = tmp_path / "a" / "certificate.json"
    doc = json.loads(path.read_text())
    doc["parameters"]["anytime"] = False
    path.write_text(json.dumps(doc))
    assert not verify(tmp_path / "a").ok


def test_goal_needs_seen_transitions_and_says_which_rows(tmp_path):
    """A shield forbidding the task's only tool ('pay') is not goal-reachable although 'wire'
    (never logged, vacuous) declares the goal as a successor; the route names the logged rows."""
    model_path, logs = _write_model_and_logs(tmp_path, anytime_key=True)
    from safecert.shield.certify import load_inputs

    model, est = load_inputs(model_path, logs)
    rows = robust_rows(model, est)
    full = full_shield(model)
    route = goal_route(model, rows, full)
    names = [(model.labels[s], model.actions[a], model.labels[s2]) for s, a, s2 in route]
    assert names == [("start", "lookup", "found"), ("found", "pay", "paid")]
    no_pay = full.copy()
    no_pay[:, model.actions.index("pay")] = False
    assert goal_route(model, rows, no_pay) is None  # 'wire' → paid is declared, never seen
