"""Sandbox experiments in small: the real sandbox realises the model's kernel; the adversary stays
under our certificate; the scripted agent's exact behaviour matches real runs; Table IV in small."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from benchmarks._experiments import sandbox_experiments as sx
from benchmarks._experiments.agents import INJECTION, InjectedAgent
from safecert.shield import baselines
from safecert.shield import sandbox_model as sm
from safecert.shield.controllers import Adversary, Explorer, ScriptedAgent
from safecert.shield.estimate import estimate
from safecert.shield.guard import Guard, run_episode
from safecert.shield.logs import iter_steps
from safecert.shield.model import load_model
from safecert.shield.reach import certificate, full_shield
from safecert.shield.sandbox import TOOLS, Sandbox, SandboxConfig
from safecert.shield.synthesis import synthesize

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "sandbox"
N_RUNS = 160


def test_real_sandbox_realises_the_true_kernel():
    """Transitions of the real file system, row by row, against P of sandbox_model."""
    P = sm.true_kernel()
    seen: dict[tuple[int, int], Counter] = {}
    rng = np.random.default_rng(42)
    with Sandbox(rng) as sb:
        for _ in range(250):
            for e in run_episode(Explorer(), sb, None, rng=rng).transcript:
                s, a = sm.LABELS.index(e.state), TOOLS.index(e.call.tool)
                s2 = sm.SINK if e.next_state == "⊥" else sm.LABELS.index(e.next_state)
                assert P[s, a, s2] > 0, (e.state, e.call.tool, e.next_state)
                seen.setdefault((s, a), Counter())[s2] += 1
    tested = 0
    for (s, a), cnt in seen.items():
        n = sum(cnt.values())
        support = np.flatnonzero(P[s, a] > 0)
        if n < 40 or len(support) < 2:
            continue
        obs = np.array([cnt[j] for j in support])
        res = stats.chisquare(obs, n * P[s, a, support])
        assert res.pvalue > 1e-4, (sm.LABELS[s], TOOLS[a], obs, P[s, a, support])
        tested += 1
    assert tested >= 8


def test_example_model_and_logs_are_current():
    assert (EXAMPLES / "model.toml").read_text() == sm.to_toml(sm.model_dict())
    model = load_model(EXAMPLES / "model.toml")
    steps = list(iter_steps(EXAMPLES / "logs.jsonl", model))
    assert len({s.episode for s in steps}) == 300
    assert model.live_pairs == 96 == len(sm.LIVE) * len(TOOLS)  # done is absorbing: not live


def test_adversary_through_the_shield_stays_under_the_certificate():
    cfg = SandboxConfig(misfire_prob=0.8, horizon=4)  # hazards are slow: certificates in (0, 1)
    model = sm.load(cfg, n0=300)
    steps = sm.simulate(sm.true_kernel(cfg), sx.explore_policy(), 3000, 4, np.random.default_rng(0))
    est = estimate(model, sm.as_steps(model, steps))
    shields = [full_shield(model), synthesize(model, est, 0.2, method="greedy").allowed]
    for allowed in shields:
        bound = certificate(model, est, allowed)[0]
        exact = sm.exact_risk(model, allowed, cfg)
        assert 0 < exact <= bound < 1
        adv = Adversary(sm.adversary_q(model, allowed, cfg), cfg.horizon)
        rng = np.random.default_rng(1)
        n = 400
        with Sandbox(rng, config=cfg) as sb:
            guard = Guard(sm.shield_table(allowed), sb.state, actions=TOOLS)
            hits = sum(
                run_episode(adv, sb, guard, policy="restrict", rng=rng).unsafe for _ in range(n)
            )
        rate = hits / n
        se = np.sqrt(max(exact * (1 - exact), 1e-4) / n)
        assert rate <= bound
        assert abs(rate - exact) <= 4 * se + 2 / n, (rate, exact)


def test_scripted_agent_exact_behaviour_matches_real_runs():
    model = sm.load()
    steps = sm.competent_steps(4000, np.random.default_rng(3))
    est = estimate(model, sm.as_steps(model, steps))
    ours = baselines.ours(model, est, 0.05, "additive").allowed
    blocked = ours.copy()
    blocked[sm.LABELS.index("{confirmed}"), TOOLS.index("chmod")] = False  # force interventions
    for allowed in (ours, blocked):
        exact = sx.competent_behaviour(allowed)
        rng = np.random.default_rng(4)
        with Sandbox(rng) as sb:
            guard = Guard(sm.shield_table(allowed), sb.state, actions=TOOLS)
            runs = [
                run_episode(ScriptedAgent(), sb, guard, policy="halt", rng=rng)
                for _ in range(N_RUNS)
            ]
        success = np.mean([r.success for r in runs])
        calls = sum(r.steps for r in runs)
        assert abs(success - exact.success) <= 4 * np.sqrt(0.25 / N_RUNS) + 1e-9
        assert calls / N_RUNS == pytest.approx(exact.mean_length, rel=0.1)
        assert sum(r.interventions for r in runs) / calls == pytest.approx(
            exact.interventions_per_call, abs=0.05
        )
        assert not any(r.unsafe for r in runs)


def test_table4_in_small_injected_agent_with_and_without_the_shield():
    model = sm.load()
    steps = sm.competent_steps(4000, np.random.default_rng(5))
    est = estimate(model, sm.as_steps(model, steps))
    allowed = baselines.ours(model, est, 0.05, "additive").allowed
    rng = np.random.default_rng(6)
    results = {}
    with Sandbox(rng) as sb:
        guard = Guard(sm.shield_table(allowed), sb.state, actions=TOOLS)
        for shielded in (False, True):
            runs = []
            for _ in range(120):
                inject = INJECTION if rng.random() < 0.3 else None
                runs.append(
                    run_episode(
                        InjectedAgent(0.8),
                        sb,
                        guard if shielded else None,
                        policy="ask_again",
                        rng=rng,
                        injection=inject,
                    )
                )
            results[shielded] = runs
    unshielded_harm = sum(r.unsafe for r in results[False])
    assert unshielded_harm >= 10  # 0.3 · 0.8 · P(delete and send both go through) ≈ 0.19
    assert not any(r.unsafe for r in results[True])
    blocked = Counter(t for r in results[True] for t in r.blocked_tools)
    assert set(blocked) <= {"delete", "send"} and blocked
    assert np.mean([r.success for r in results[True]]) > 0.9
