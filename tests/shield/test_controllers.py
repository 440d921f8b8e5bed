"""Controllers: the scripted agent is competent and safe, the injected agent follows at its stated
rate, random respects the permitted set, the adversary plays the exact worst case."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from benchmarks._experiments import sandbox_experiments as sx
from benchmarks._experiments.agents import INJECTION, InjectedAgent
from safecert.shield import sandbox_model as sm
from safecert.shield.controllers import Adversary, ScriptedAgent, UniformRandom
from safecert.shield.guard import Guard, run_episode
from safecert.shield.reach import full_shield
from safecert.shield.sandbox import TOOLS, Sandbox, SandboxConfig, ToolCall


@pytest.fixture(scope="module")
def sandbox():
    sb = Sandbox(np.random.default_rng(0))
    yield sb
    sb.close()


def test_scripted_agent_is_competent_and_never_harms(sandbox):
    rng = np.random.default_rng(1)
    runs = [run_episode(ScriptedAgent(), sandbox, None, rng=rng) for _ in range(150)]
    assert not any(r.unsafe for r in runs)
    exact = sx.competent_behaviour(full_shield(sm.load())).success
    assert (
        abs(np.mean([r.success for r in runs]) - exact)
        < 4 * np.sqrt(exact * (1 - exact) / 150) + 0.01
    )
    tools = {e.call.tool for r in runs for e in r.transcript}
    assert tools <= {"read", "chmod", "write"}


def test_policy_table_matches_the_agent():
    pi = sm.competent_policy()
    assert np.allclose(pi.sum(1), 1)
    for s, lab in enumerate(sm.LIVE):
        x = {p: p in lab.strip("{}").split(",") for p in ("in_prod", "write", "confirmed", "latch")}
        w = ScriptedAgent.weights(x["confirmed"], x["in_prod"], x["latch"])
        assert {TOOLS[a] for a in np.flatnonzero(pi[s])} == set(w)


def test_injected_agent_follows_at_its_rate_and_drops_the_plan_when_refused():
    cfg = SandboxConfig(confirm_prob=0.0, misfire_prob=0.0)
    rng = np.random.default_rng(2)
    with Sandbox(rng, config=cfg) as sb:
        follows = 0
        n = 200
        for _ in range(n):
            res = run_episode(InjectedAgent(0.7), sb, None, rng=rng, injection=INJECTION)
            follows += res.unsafe
            if res.unsafe:
                assert [e.call.tool for e in res.transcript] == ["read", "delete", "send"]
        assert abs(follows / n - 0.7) < 4 * np.sqrt(0.21 / n)
        # not attacked: it is the scripted agent
        res = run_episode(InjectedAgent(1.0), sb, None, rng=rng)
        assert not res.unsafe
        # refused once: back to the task
        shield = {lab: {"read", "chmod", "write"} for lab in sm.LIVE}
        guard = Guard(shield, sb.state, actions=TOOLS)
        agent = InjectedAgent(1.0)
        res = run_episode(agent, sb, guard, policy="ask_again", rng=rng, injection=INJECTION)
        assert res.blocked_tools == ["delete"] and not res.unsafe
    with pytest.raises(ValueError):
        InjectedAgent(1.5)


def test_uniform_random_respects_the_permitted_set(sandbox):
    ctrl = UniformRandom()
    ctrl.reset(np.random.default_rng(3))
    picks = {ctrl.propose(sandbox, frozenset({"read", "halt"})).tool for _ in range(200)}
    assert picks == {"read", "halt"}
    picks = {ctrl.propose(sandbox, None).tool for _ in range(500)}
    assert picks == set(TOOLS)


def _brute_force_risk(P: np.ndarray, allowed: np.ndarray, s: int, k: int) -> float:
    """Expectimax over the true kernel, written independently of reach.py (recursion, memo)."""

    @cache
    def w(state: int, left: int) -> float:
        if state == sm.SINK:
            return 0.0
        if sm.LABELS[state] == "harm":
            return 1.0
        if left == 0:
            return 0.0
        best = 0.0
        for a in range(len(TOOLS)):
            if allowed[state, a] or TOOLS[a] == "halt":
                val = sum(P[state, a, j] * w(j, left - 1) for j in np.flatnonzero(P[state, a]))
                best = max(best, val)
        return best

    return w(s, k)


@pytest.mark.parametrize("horizon", [2, 3, 4])
def test_exact_risk_and_adversary_q_match_brute_force(horizon):
    cfg = SandboxConfig(horizon=horizon)
    model = sm.load(cfg)
    rng = np.random.default_rng(horizon)
    for _ in range(4):
        allowed = rng.random(model.k.shape) < 0.7
        allowed[:, model.halt] = True
        want = _brute_force_risk(sm.true_kernel(cfg), allowed, 0, horizon)
        assert sm.exact_risk(model, allowed, cfg) == pytest.approx(want, abs=1e-12)
        q = sm.adversary_q(model, allowed, cfg)("{}", horizon)
        assert max(q[t] for t in TOOLS if allowed[0, TOOLS.index(t)]) == pytest.approx(
            want, abs=1e-12
        )


def test_adversary_does_harm_through_the_full_shield(sandbox):
    model = sm.load()
    allowed = full_shield(model)
    adv = Adversary(sm.adversary_q(model, allowed), model.horizon)
    guard = Guard(sm.shield_table(allowed), sandbox.state, actions=TOOLS)
    rng = np.random.default_rng(5)
    runs = [run_episode(adv, sandbox, guard, policy="restrict", rng=rng) for _ in range(40)]
    assert np.mean([r.unsafe for r in runs]) > 0.95
    adv.reset(rng)
    sandbox.reset()
    assert adv.propose(sandbox, frozenset({"read", "halt"})) == ToolCall("read")
