"""The three-check verifier: proofs, replayed counterexamples, timeouts, solver agreement."""

from __future__ import annotations

import numpy as np
import pytest

from safecert.bnn.networks import ReluNetwork, forward, load_policy
from safecert.bnn.replay import ReplayReport
from safecert.bnn.solvers import Milp, solve
from safecert.bnn.spec import WeightBox, default_spec
from safecert.bnn.system import get_benchmark
from safecert.bnn.verifier import Counterexample, Proof, Unknown, Verifier, decide
from safecert.errors import ConfigError
from tests.bnn._toy import l1_ball_invariant, toy


def _lds_box(eps="2sigma") -> WeightBox:
    return default_spec("lds").box(load_policy("lds"), eps)


@pytest.mark.parametrize("solver", ["highs", "scip"])
def test_true_invariant_is_proved(solver) -> None:
    verdict = Verifier(toy(gain=0.1), _lds_box(), solver=solver, tighten=solver == "scip").check(
        l1_ball_invariant()
    )
    assert isinstance(verdict, Proof)
    assert [c.condition for c in verdict.checks][:2] == ["closure", "initial"]
    assert {c.condition for c in verdict.checks} == {"closure", "initial", "unsafe"}
    assert all(c.status == "infeasible" for c in verdict.checks)


def test_proved_invariant_survives_1e5_random_closure_samples() -> None:
    bench, box, g = toy(gain=0.1), _lds_box(), l1_ball_invariant()
    assert isinstance(Verifier(bench, box).check(g), Proof)
    rng = np.random.default_rng(0)
    n = 0
    while n < 100_000:
        x = bench.box.sample(rng, 400)
        x = x[g.forward(x)[:, 0] >= 0.0]
        u = forward(box.sample_uniform(rng), x)  # one weight draw per batch, 250+ batches
        x1 = bench.step(x, u)
        assert np.all(g.forward(x1)[:, 0] >= 0.0) and np.all(bench.in_box(x1))
        n += len(x)


def test_leaky_system_gives_a_replayed_closure_counterexample() -> None:
    policy = ReluNetwork([(np.array([[3.0], [3.0]]), np.array([0.0]))])  # u = 3(x0 + x1)
    box = WeightBox.point(policy)
    verdict = Verifier(toy(gain=0.4), box).check(l1_ball_invariant())
    assert isinstance(verdict, Counterexample) and verdict.condition == "closure"
    assert verdict.replay.ok and g_of(verdict.x) >= 0 > g_of(verdict.x_next)
    np.testing.assert_allclose(verdict.x_next, toy(0.4).step(verdict.x, policy.forward(verdict.x)))


@pytest.mark.parametrize("gain,strict", [(0.4, False), (0.6, True)])
def test_incumbents_give_more_counterexamples_each_replayed(gain, strict) -> None:
    """Every extra counterexample from the solver's incumbents is a real violation, recomputed
    here by hand in float64; the main counterexample is the one found without the pool."""
    box = _lds_box()
    bench, g = toy(gain=gain), l1_ball_invariant()
    kw = {"first_feasible": False, "strict_closure": strict}
    with_pool = Verifier(bench, box, incumbents=True, **kw).check(g)
    plain = Verifier(bench, box, **kw).check(g)
    assert isinstance(with_pool, Counterexample) and isinstance(plain, Counterexample)
    np.testing.assert_array_equal(with_pool.x, plain.x)
    assert plain.more == () and len(with_pool.more) >= 1
    seen = {with_pool.x.tobytes()}
    for rep in with_pool.more:
        assert rep.ok and rep.weights is not None and box.contains(rep.weights)
        x_next = bench.step(rep.x, forward(rep.weights, rep.x))
        np.testing.assert_array_equal(x_next, rep.x_next)
        assert g_of(rep.x) >= 0 and (g_of(x_next) < 0 or not bench.in_box(x_next))
        assert rep.x.tobytes() not in seen
        seen.add(rep.x.tobytes())


def g_of(x) -> float:
    return float(l1_ball_invariant().forward(x)[0])


def test_initial_and_unsafe_violations_are_found_in_order() -> None:
    bench, box = toy(gain=0.1, initial=0.6), _lds_box()
    verdict = Verifier(bench, box).check(l1_ball_invariant())  # ‖x‖₁ up to 1.2 in X0
    assert isinstance(verdict, Counterexample) and verdict.condition == "initial"
    assert bench.in_initial(verdict.x) and g_of(verdict.x) < 0
    big = l1_ball_invariant(radius=1.3)  # reaches ‖x‖∞ = 1.2 inside Inv
    verdict = Verifier(toy(gain=0.1), box).check_unsafe(big)
    assert (
        isinstance(verdict, Counterexample)
        and bench.in_unsafe(verdict.x)
        and g_of(verdict.x) + 0.3 >= 0
    )


def test_timeout_is_unknown_never_unsafe() -> None:
    rng = np.random.default_rng(0)
    g = ReluNetwork(
        [
            (rng.normal(size=(2, 48)), rng.normal(size=48)),
            (rng.normal(size=(48, 48)) / 5, rng.normal(size=48)),
            (rng.normal(size=(48, 1)), np.array([-30.0])),
        ]
    )
    box = default_spec("pend_all").box(load_policy("pend_all"), "2sigma")
    verdict = Verifier(get_benchmark("pend"), box, time_limit_s=0.1).check_closure(g)
    assert isinstance(verdict, Unknown) and "timeout" in verdict.reason


def test_witness_that_does_not_replay_is_reported_not_used() -> None:
    margins = []

    def build(m):
        margins.append(m)
        milp = Milp()
        x = milp.add_vars(np.zeros(1), np.ones(1))
        milp.set_objective(x, [1.0])
        return milp, lambda sol: ReplayReport(False, "float64 disagrees", np.asarray(sol))

    verdict = decide(
        "closure", build, lambda m, first: solve(m, stop_at_first=first), True, 1e-6, 1e-5
    )
    assert isinstance(verdict, Unknown) and verdict.spurious and "did not replay" in verdict.reason
    assert all(c.status == "spurious" for c in verdict.checks)
    assert margins[:2] == [1e-6, -1e-5]  # relaxed, then strict


def test_boundary_witnesses_are_replaced_by_robust_ones() -> None:
    """A relaxed witness at g(x) = −margin does not replay; the strict re-ask finds one that does."""
    policy = ReluNetwork([(np.array([[3.0], [3.0]]), np.array([0.0]))])
    v = Verifier(toy(gain=0.4), WeightBox.point(policy), margin=1e-3)
    verdict = v.check_closure(l1_ball_invariant())
    assert isinstance(verdict, Counterexample) and verdict.replay.ok
    assert verdict.replay.g_x >= 0.0


@pytest.mark.parametrize(
    ("lo", "hi", "verdict", "n_milps"),
    [
        (0.0, 1.0, Counterexample, 1),  # a robust violation: found by the strict question alone
        (-1.0, 0.0, Unknown, 2),  # only on the margin: strict infeasible, relaxed witness spurious
        (-1.0, -0.5, Proof, 2),  # none: the proof is the relaxed query's infeasibility
    ],
)
def test_strict_first_order_keeps_the_relaxed_query_for_proofs(lo, hi, verdict, n_milps) -> None:
    """Violation: x ≥ 0 for x ∈ [lo, hi]; the query relaxed by m asks x ≥ −m; replay: x > 0."""
    margins = []

    def build(m):
        margins.append(m)
        milp = Milp()
        x = milp.add_vars([lo], [hi])
        milp.add_row(x, [1.0], lo=-m)
        milp.set_objective(x, [1.0])
        return milp, lambda sol: ReplayReport(bool(sol[0] > 0), "x > 0?", np.asarray(sol))

    def solve_fn(m, first):
        return solve(m, stop_at_first=first)

    got = decide("closure", build, solve_fn, False, 1e-6, 1e-5, strict_first=True)
    assert isinstance(got, verdict) and len(got.checks) == n_milps
    assert margins == [-1e-5, 1e-6][:n_milps]  # strict first, then relaxed
    margins.clear()
    default = decide("closure", build, solve_fn, False, 1e-6, 1e-5)
    assert type(default) is type(got) and margins[0] == 1e-6


@pytest.mark.parametrize("gain", [0.1, 0.4])
def test_strict_closure_verifier_agrees_with_the_default(gain) -> None:
    policy = ReluNetwork([(np.array([[3.0], [3.0]]), np.array([0.0]))])
    box = _lds_box() if gain == 0.1 else WeightBox.point(policy)
    verdicts = [
        Verifier(toy(gain=gain), box, strict_closure=s).check(l1_ball_invariant())
        for s in (False, True)
    ]
    assert type(verdicts[0]) is type(verdicts[1])
    assert isinstance(verdicts[0], Proof if gain == 0.1 else Counterexample)
    if isinstance(verdicts[1], Proof):  # both closure queries asked, the relaxed one last
        closure = [c for c in verdicts[1].checks if c.condition == "closure"]
        assert [c.status for c in closure] == ["infeasible", "infeasible"]


@pytest.mark.parametrize(("name", "seed"), [("lds", 3), ("pend", 3), ("car", 3), ("car", 4)])
def test_closure_optimum_bounds_sampled_violations(name, seed) -> None:
    """Random (x, w) pairs that leave Inv never beat the MILP's optimum g(x) − g(x')."""
    bench = get_benchmark(name)
    box = default_spec(name).box(load_policy(name), "1sigma")
    rng = np.random.default_rng(seed)
    h = 8
    g = ReluNetwork(
        [
            (rng.normal(size=(bench.state_dim, h)), rng.normal(size=h)),
            (rng.normal(size=(h, 1)), np.array([0.5])),
        ]
    )
    q = Verifier(bench, box).closure_query(g)
    res = solve(q.milp)
    assert res.status in ("feasible", "infeasible")
    best, found = -np.inf, False
    for _ in range(200):
        x = bench.step_box.sample(rng, 200, bench.integer)
        x1 = bench.step(x, forward(box.sample_uniform(rng), x))
        gx, g1 = g.forward(x)[:, 0], g.forward(x1)[:, 0]
        bad = (gx >= 0) & ((g1 < 0) | ~bench.in_box(x1))
        found |= bool(bad.any())
        best = max(best, float(np.max((gx - g1)[bad & (g1 < 0)], initial=-np.inf)))
    if res.status == "infeasible":
        assert not found
    else:
        assert res.optimal and best <= res.bound + 1e-6


def test_bad_inputs() -> None:
    with pytest.raises(ConfigError, match="policy"):
        Verifier(get_benchmark("car"), _lds_box())
    with pytest.raises(ConfigError, match="invariant"):
        Verifier(toy(0.1), _lds_box()).check(ReluNetwork([(np.ones((3, 1)), np.zeros(1))]))
    with pytest.raises(ConfigError, match="initial"):
        Verifier(toy(0.1, initial=1.5), _lds_box())


@pytest.mark.parametrize(("name", "seed"), [("lds_all", 3), ("car", 4)])
def test_lp_tightening_changes_speed_not_answers(name, seed) -> None:
    bench = get_benchmark(name)
    box = default_spec(name).box(load_policy(name), "1sigma")
    rng = np.random.default_rng(seed)
    g = ReluNetwork(
        [
            (rng.normal(size=(bench.state_dim, 8)), rng.normal(size=8)),
            (rng.normal(size=(8, 1)), np.array([0.5])),
        ]
    )
    plain = solve(Verifier(bench, box).closure_query(g).milp)
    tight_q = Verifier(bench, box, tighten=True).closure_query(g).milp
    tight = solve(tight_q)
    assert plain.status == tight.status == "feasible" and plain.optimal and tight.optimal
    assert tight.objective == pytest.approx(plain.objective, abs=1e-5)
