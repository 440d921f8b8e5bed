from __future__ import annotations

import numpy as np
import pytest

from safecert.bnn.cegis import (
    WALL_CLOCK_GUARD,
    CegisSettings,
    SampledViolation,
    SamplingFalsifier,
    absorb,
    cegis,
    guard_reason,
    initial_data,
)
from safecert.bnn.config import bayesian_spec, load_policy_network
from safecert.bnn.learner import Learner, LearnerSettings, TrainingData
from safecert.bnn.networks import ReluNetwork
from safecert.bnn.sampling import SafeBNNPolicy, closed_loop
from safecert.bnn.search import BnnProblem
from safecert.bnn.setup import benchmark_config, load_config
from safecert.bnn.spec import parse_epsilon
from safecert.bnn.system import build_system, get_benchmark
from safecert.bnn.verifier import Proof, Verifier
from safecert.certificate import read_certificate
from tests.bnn.conftest import EPS


def _const(value: float, dim: int = 2) -> ReluNetwork:
    return ReluNetwork([(np.zeros((dim, 1)), np.array([value]))])


@pytest.fixture(scope="module")
def certified(lds_run):
    """Alg. 1 on the LDS at a small ε — the shared `safecert bnn verify` run (tests/bnn/conftest):
    the problem it solved, ε, its certificate and the invariant g it exported."""
    cfg = load_config(lds_run.folder / "run.toml")
    mean, _ = load_policy_network(cfg, lds_run.folder)
    system = build_system(cfg.system, cfg.dynamics, cfg.sets)  # the run's, X0 = 0.4
    problem = BnnProblem(system, mean, bayesian_spec(cfg, mean), cfg)
    cert = read_certificate(lds_run.certificate)
    assert cert.result.invariant is not None
    g = ReluNetwork.from_lists([layer.model_dump() for layer in cert.result.invariant.layers])
    return problem, parse_epsilon(EPS), cert, g


def test_cegis_certifies_the_lds_and_the_proof_is_reproducible(certified):
    problem, eps, cert, g = certified
    assert cert.verdict == "SAFE", cert.result.reason
    checks = cert.result.checks.model_dump()
    assert checks == {"closure": "infeasible", "initial": "infeasible", "unsafe": "infeasible"}
    # an independent verifier run on the exported network agrees
    again = Verifier(problem.bench, problem.box(eps), time_limit_s=None, first_feasible=False)
    proof = again.check(g)
    assert isinstance(proof, Proof)
    assert {c.condition for c in proof.checks} == {"closure", "initial", "unsafe"}
    assert all(c.status == "infeasible" for c in proof.checks)
    runtimes = cert.result.runtimes_s
    assert runtimes is not None and runtimes.total_s >= runtimes.verifier_s > 0


def test_certified_invariant_survives_1e5_random_closure_samples(certified):
    problem, eps, _, g = certified
    bench, box = problem.bench, problem.box(eps)
    rng = np.random.default_rng(123)
    # independent route: WeightBox.sample_uniform per weight draw is slow, so draw kernels with
    # plain numpy uniform(lower, upper) per sample, and states by rejection from the box
    x = bench.box.sample(rng, 400_000)
    x = x[g.forward(x)[:, 0] >= 0][:100_000]
    assert len(x) == 100_000
    (w0, b0), (w1l, b1), (w1u, _) = box.lower[0], box.lower[1], box.upper[1]
    w1 = rng.uniform(w1l[None], w1u[None], size=(len(x), *w1l.shape))
    u = np.einsum("ni,nio->no", np.maximum(x @ w0 + b0, 0.0), w1) + b1
    x1 = bench.step(x, u)
    assert np.all(bench.in_box(x1))
    assert np.all(g.forward(x1)[:, 0] >= 0)
    assert not np.any(bench.in_unsafe(x[g.forward(x)[:, 0] >= 0]))


def test_rejection_sampled_closed_loop_has_no_unsafe_state_in_1e5_steps(certified):
    problem, eps, _, g = certified
    bench = problem.bench
    policy = SafeBNNPolicy(problem.box(eps), problem.spec, np.random.default_rng(7))
    out = closed_loop(bench, policy, bench.sample_initial(np.random.default_rng(8), 1000), 100)
    assert out.transitions == 100_000
    assert out.unsafe_states == 0
    assert np.all(g.forward(out.states.reshape(-1, 2))[:, 0] >= 0)  # stays in Inv
    # at 0.1σ a raw posterior draw lands in the box with probability ~3e-18: joint rejection
    # would never return, the exact per-weight truncation does
    assert policy.expected_acceptance < 1e-15 and policy.acceptance_rate == 0.0


def test_no_retraining_ablation_stops_with_unknown_never_unsafe():
    bench = get_benchmark("lds")
    cfg = benchmark_config("lds")
    mean, _ = load_policy_network(cfg, None)
    box = bayesian_spec(cfg, mean).box(mean, "0.5sigma")
    rng = np.random.default_rng(0)
    data, _ = initial_data(bench, rng, initial_samples=50, unsafe_samples=50)
    learner = Learner(LearnerSettings(epochs=2), low=bench.box.lo, high=bench.box.hi)
    res = cegis(
        learner,
        Verifier(bench, box, time_limit_s=30, first_feasible=False),
        bench,
        data,
        CegisSettings(max_iterations=5, retrain=False),
    )
    assert res.verdict == "UNKNOWN"
    assert res.verifier_calls == 1 and res.iterations == 1


def test_wall_clock_guard_gives_unknown_marked_machine_dependent():
    bench = get_benchmark("lds")
    cfg = benchmark_config("lds")
    mean, _ = load_policy_network(cfg, None)
    box = bayesian_spec(cfg, mean).box(mean, "1sigma")
    data, _ = initial_data(bench, np.random.default_rng(0), initial_samples=50, unsafe_samples=50)
    learner = Learner(LearnerSettings(epochs=2, warm_epochs=1), low=bench.box.lo, high=bench.box.hi)
    res = cegis(
        learner,
        Verifier(bench, box, time_limit_s=30),
        bench,
        data,
        CegisSettings(max_iterations=50, guard_s=0.0, guard_key="limits.per_epsilon_s"),
    )
    assert res.verdict == "UNKNOWN" and res.machine_dependent
    # the learner asks the guard too, and the reason prints the configured limit
    assert res.reason == guard_reason(
        "limits.per_epsilon_s = 0 s reached in the learner after 0 iterations"
    )
    assert res.reason.startswith(WALL_CLOCK_GUARD)
    assert res.runtimes_s["wall_s"] > 0 and res.verifier_calls == 0


def test_falsifier_finds_planted_violations():
    bench = get_benchmark("lds")
    cfg = benchmark_config("lds")
    mean, _ = load_policy_network(cfg, None)
    box = bayesian_spec(cfg, mean).box(mean, "1sigma")
    fal = SamplingFalsifier(bench, box, np.random.default_rng(0), samples=2000)
    everywhere = fal.find(_const(1.0))  # Inv = B: meets X_u, and some states step out of B
    kinds = {v.condition for v in everywhere}
    assert kinds == {"closure", "unsafe"}
    for v in everywhere:
        if v.condition == "closure":
            assert not bench.in_box(v.x_next[None])[0]
        else:
            assert bench.in_unsafe(v.x[None])[0]
    nowhere = fal.find(_const(-1.0))  # Inv = ∅ misses X0
    assert {v.condition for v in nowhere} == {"initial"}


def test_absorb_routes_each_counterexample():
    bench = get_benchmark("lds")
    data = TrainingData(np.zeros((1, 2)), np.ones(1))
    assert (
        absorb(data, bench, SampledViolation("closure", np.zeros(2), np.array([0.5, 0.5])))
        == "D_ce"
    )
    assert (
        absorb(data, bench, SampledViolation("closure", np.zeros(2), np.array([1.3, 0.0])))
        == "D_spec(0)"
    )
    assert absorb(data, bench, SampledViolation("initial", np.full(2, 0.1))) == "D_spec(1)"
    assert absorb(data, bench, SampledViolation("unsafe", np.full(2, 1.2))) == "D_spec(0)"
    assert len(data.ce_x) == 1
    np.testing.assert_array_equal(data.spec_y, [1, 0, 1, 0])


def test_safe_exploration_projects_means_and_only_runs_certified_boxes(certified):
    from safecert.bnn.sampling import safe_exploration

    problem, eps, _, g = certified
    bench, spec = problem.bench, problem.spec
    certified_boxes = []

    def certify(mean):  # re-verify the same invariant for the box around the new means
        box = spec.box(mean, eps)
        if isinstance(Verifier(bench, box, time_limit_s=60, first_feasible=False).check(g), Proof):
            certified_boxes.append(box)
            return box
        return None

    def shrink(mean, result):  # gradient of ½‖W‖² on the Bayesian layer: pull weights to 0
        return [
            (np.zeros_like(w), np.zeros_like(b)) if k == 0 else (w, np.zeros_like(b))
            for k, (w, b) in enumerate(mean.layers)
        ]

    history = safe_exploration(
        bench,
        spec,
        problem.mean,
        certify,
        shrink,
        learning_rate=1.0,
        iterations=2,
        rollouts=200,
        steps=50,
        rng=np.random.default_rng(3),
    )
    assert 1 <= len(history) <= 2
    for step in history:
        assert step.unsafe_states == 0
    first = history[0]
    # the update μ − 1.0·μ = 0 is projected back into [μ − ε, μ + ε]: it moves by exactly ε
    moved = first.next_mean.layers[1][0] - first.mean.layers[1][0]
    np.testing.assert_allclose(np.abs(moved), 0.01, rtol=1e-9)
    assert first.box.contains(first.next_mean.layers)
    np.testing.assert_array_equal(first.next_mean.layers[0][0], problem.mean.layers[0][0])
    for prev, step in zip(history, history[1:], strict=False):
        assert step.mean is prev.next_mean
