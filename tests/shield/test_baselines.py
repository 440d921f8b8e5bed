"""Table III baselines on the sandbox, each checked against an independent computation."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize, stats

from benchmarks._experiments import sandbox_experiments as sx
from safecert.shield import baselines
from safecert.shield import sandbox_model as sm
from safecert.shield.controllers import Adversary
from safecert.shield.estimate import estimate
from safecert.shield.guard import Guard, run_episode
from safecert.shield.reach import robust_rows
from safecert.shield.sandbox import TOOLS, Sandbox
from safecert.shield.synthesis import forbidden_fraction, reachable


def pct(model, allowed):
    return 100.0 * forbidden_fraction(model, allowed)


@pytest.fixture(scope="module")
def logs():
    model = sm.load()
    steps = sm.competent_steps(4000, np.random.default_rng(11))
    return model, steps, baselines.full_counts(model, sm.as_steps(model, steps))


def test_full_counts_and_plug_in_rows_match_brute_force(logs):
    model, steps, full = logs
    rows = baselines.plug_in_rows(model, full)
    for (s, a), n in zip(*np.unique(steps[:, 2:4], axis=0, return_counts=True), strict=True):
        assert full.visits[s, a] == n
        sel = (steps[:, 2] == s) & (steps[:, 3] == a)
        for j, s2 in enumerate(model.successors(s, a)):
            s2_log = sm.SINK if s2 == model.sink else s2
            assert rows.p[s, a, j] == pytest.approx(np.mean(steps[sel, 4] == s2_log))
    # an unvisited hazard row is assumed harmless: all mass on "nothing happens"
    s, a = sm.LABELS.index("{in_prod,write}"), TOOLS.index("write")
    assert full.visits[s, a] == 0
    j = list(model.successors(s, a)).index(s)
    assert rows.p[s, a, j] == 1.0


def test_dirichlet_radius_matches_the_beta_quantile(logs):
    model, _, full = logs
    rows = baselines.dirichlet_rows(model, full, np.random.default_rng(0), draws=40_000)
    level = 1 - model.delta / model.stochastic_rows
    checked = 0
    for s, a in np.argwhere((model.k == 2) & model.live[:, None]):
        a1, a2 = full.counts[s, a, :2] + 1.0
        m1 = a1 / (a1 + a2)

        # ‖q − mean‖₁ = 2|q1 − m1| with q1 ~ Beta(a1, a2): solve P(2|q1 − m1| ≤ r) = level
        def cover(r, a1=a1, a2=a2, m1=m1):
            return stats.beta.cdf(m1 + r / 2, a1, a2) - stats.beta.cdf(m1 - r / 2, a1, a2) - level

        exact = optimize.brentq(cover, 1e-9, 2.0)
        assert rows.radius[s, a] == pytest.approx(exact, rel=0.08, abs=2e-3)
        checked += 1
    assert checked >= 10


def _adversary_harm_rate(model, allowed, episodes, seed):
    adv = Adversary(sm.adversary_q(model, allowed), model.horizon)
    with Sandbox(np.random.default_rng(seed)) as sb:
        guard = Guard(sm.shield_table(allowed), sb.state, actions=TOOLS)
        rng = np.random.default_rng(seed + 1)
        hits = sum(
            run_episode(adv, sb, guard, policy="restrict", rng=rng).unsafe for _ in range(episodes)
        )
    return hits / episodes


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_plug_in_and_policy_specific_certify_zero_yet_the_adversary_does_harm(seed):
    model = sm.load()
    steps = sm.competent_steps(4000, np.random.default_rng(seed))
    full = baselines.full_counts(model, sm.as_steps(model, steps))
    plug = baselines.plug_in(model, full, 0.05, "additive")
    pol = baselines.policy_specific(
        model, 4000, int((steps[:, 4] == sm.LABELS.index("harm")).sum())
    )
    assert plug.bound == 0.0 and pol.bound < 1e-3
    for sh in (plug, pol):
        assert pct(model, sh.allowed) == 0.0
        assert sm.exact_risk(model, sh.allowed) > 0.99
        assert _adversary_harm_rate(model, sh.allowed, 20, seed) >= 0.8  # real sandbox


def test_ours_forbids_far_fewer_pairs_than_count_threshold_and_is_safe(logs):
    model, steps, full = logs
    est = estimate(model, sm.as_steps(model, steps))
    count = baselines.count_threshold(model, full)
    assert count.bound is None
    # independent: pairs with < 10 visits, never halt, over the 96 working pairs
    visits = np.zeros((16, 6), int)
    assert (steps[:, 2] < 16).all()  # logged steps start in working states
    np.add.at(visits, (steps[:, 2], steps[:, 3]), 1)
    expect = 100 * ((visits < 10) & (np.arange(6) != TOOLS.index("halt"))).sum() / 96
    assert pct(model, count.allowed) == pytest.approx(expect)
    assert pct(model, count.allowed) == pytest.approx(80.2083, abs=0.01)  # paper: 80.2 %
    for method in ("additive", "robust_q"):
        ours = baselines.ours(model, est, 0.05, method)
        assert ours.bound <= 0.05
        assert pct(model, ours.allowed) * 2.5 < pct(model, count.allowed)
        assert sm.exact_risk(model, ours.allowed) <= ours.bound + 1e-12
        assert sx.competent_behaviour(ours.allowed).success > 0.95


def test_table3_rows_for_one_seed():
    rows = {r["name"]: r for r in sx.table3_rows(0)}
    assert set(rows) >= {"ours (robust_q)", "ours (additive)", "plug-in", "policy-specific",
                         "count<10", "dirichlet (additive)"}  # fmt: skip
    for r in rows.values():
        assert set(r) == {"name", "bound", "adversary_unsafe", "success", "forbidden_pct",
                          "intervention_rate", "mean_length"}  # fmt: skip
        if r["bound"] is not None and r["name"].startswith(("ours", "dirichlet")):
            assert r["adversary_unsafe"] <= r["bound"] + 1e-12 <= 0.05 + 1e-12
    assert rows["plug-in"]["adversary_unsafe"] > 0.99 and rows["count<10"]["bound"] is None
    assert rows["ours (additive)"]["forbidden_pct"] <= rows["dirichlet (additive)"]["forbidden_pct"]


def test_live_pairs_are_the_papers_96_and_one_definition_for_all_shields(logs):
    model, _, _ = logs
    assert model.live_pairs == 96 and model.working.sum() == 16
    assert not model.working[sm.LABELS.index("done")] and not model.working[sm.LABELS.index("harm")]
    allowed = np.ones(model.k.shape, bool)
    allowed[sm.LABELS.index("done"), TOOLS.index("read")] = False  # not a live pair
    allowed[0, TOOLS.index("write")] = False
    assert pct(model, allowed) == pytest.approx(100 / 96)


def test_robust_q_forbids_only_pairs_in_reachable_states(logs):
    """Pairs in states no controller can reach from s0 cannot change V̄_T(s0): robust-Q must not
    spend permissiveness on them (it used to forbid 25 % of the live pairs this way)."""
    model, steps, _ = logs
    est = estimate(model, sm.as_steps(model, steps))
    ours = baselines.ours(model, est, 0.05, "robust_q")
    reach = reachable(model, robust_rows(model, est), ours.allowed)
    forbidden = np.argwhere(~ours.allowed)
    assert len(forbidden) and reach[forbidden[:, 0]].all()
    assert pct(model, ours.allowed) < 10.0
