"""Unsafe-trajectory witnesses (safecert.bnn.witness): found where no invariant exists, never where
the verifier proves one, refused by the replay when anything is off, and ending an ε attempt at
once. The hand-written second replay of the pend_all witness is in test_no_invariant_witness.py."""

from __future__ import annotations

import numpy as np

from safecert.bnn.config import bayesian_spec, load_policy_network
from safecert.bnn.networks import forward
from safecert.bnn.sampling import batched_forward, sample_box_weights
from safecert.bnn.search import BnnProblem
from safecert.bnn.setup import benchmark_config
from safecert.bnn.spec import Epsilon, parse_epsilon
from safecert.bnn.system import build_system
from safecert.bnn.witness import corner_networks, find_witness, replay_witness, search_segment


def _pend_all(sigma: float):
    cfg = benchmark_config("pend_all")
    mean, _ = load_policy_network(cfg, None)
    spec = bayesian_spec(cfg, mean)
    bench = build_system(cfg.system, cfg.dynamics, cfg.sets)
    return bench, spec.box(mean, Epsilon(sigma, True)), BnnProblem(bench, mean, spec, cfg)


def test_found_at_one_and_a_half_sigma_and_every_check_of_the_replay_bites():
    bench, box, _ = _pend_all(1.5)
    w = find_witness(bench, box, np.random.default_rng(0), evals=40_000, horizon=12)
    assert w is not None and not w.leaves_box
    assert bool(bench.in_initial(w.path[0])) and bool(bench.in_unsafe(w.path[-1]))
    assert all(box.contains(list(step)) for step in w.weights)
    weights = [list(step) for step in w.weights]
    again = replay_witness(bench, box, w.path[0], weights)
    assert again is not None and np.array_equal(again.path[-1], w.path[-1])
    # a weight one ulp outside the box, a start outside X0, a trajectory cut short: refused
    (k, (wk, bk)) = next((k, layer) for k, layer in enumerate(weights[0]) if box.is_bayesian(k))
    bad = [list(step) for step in weights]
    over = wk.copy()
    over.flat[0] = np.nextafter(box.upper[k][0].flat[0], np.inf)
    bad[0][k] = (over, bk)
    assert replay_witness(bench, box, w.path[0], bad) is None
    outside_x0 = np.array(w.path[0])
    outside_x0[1] = 0.2 + 1e-9  # θ̇ just above X0's 0.2
    assert not bench.in_initial(outside_x0)
    assert replay_witness(bench, box, outside_x0, weights) is None
    assert replay_witness(bench, box, w.path[0], weights[:-1]) is None
    assert w.describe().startswith("no positive invariant exists")


def test_none_found_where_the_verifier_proves_an_invariant():
    """pend_all at 1σ is certified SAFE (Table 1): a witness there would contradict the proof."""
    bench, box, _ = _pend_all(1.0)
    assert find_witness(bench, box, np.random.default_rng(0), evals=40_000, horizon=12) is None


def test_corner_networks_bound_every_action_the_box_allows():
    """pend_all's Bayesian layers see only non-negative inputs: the two corners are the least and
    the greatest action at every state (checked against box draws at random states)."""
    bench, box, _ = _pend_all(1.5)
    lo, hi = corner_networks(box)
    assert box.contains(lo) and box.contains(hi)
    rng = np.random.default_rng(1)
    x = bench.box.sample(rng, 64)
    a_lo, a_hi = forward(lo, x)[:, 0], forward(hi, x)[:, 0]
    for _ in range(20):
        draws = sample_box_weights(box, rng, len(x))
        a = batched_forward(draws, x)[:, 0]
        assert np.all(a >= a_lo - 1e-12) and np.all(a <= a_hi + 1e-12)


def test_an_attempt_ends_at_once_on_a_witness_and_the_search_is_deterministic():
    _, _, problem = _pend_all(1.5)
    res = problem.run(parse_epsilon("1.5sigma"))
    assert res.verdict == "UNKNOWN" and res.reason.startswith("no positive invariant exists")
    assert res.verifier_calls == 0 and res.iterations == 0 and res.proof is None
    assert res.runtimes_s["total_s"] == res.runtimes_s["verifier_s"] > 0
    assert problem.run(parse_epsilon("1.5sigma")).reason == res.reason


def test_zero_rollouts_turn_the_search_off():
    cfg = benchmark_config(
        "pend_all",
        limits={"max_iterations": 1},
        data={"witness_rollouts": 0},
    )
    mean, _ = load_policy_network(cfg, None)
    bench = build_system(cfg.system, cfg.dynamics, cfg.sets)
    res = BnnProblem(bench, mean, bayesian_spec(cfg, mean), cfg).run(parse_epsilon("1.5sigma"))
    assert not res.reason.startswith("no positive invariant exists")


def test_the_search_stops_when_told():
    """``stop`` ends the search after the generation in progress (the attempt's time budget):
    one generation instead of the hundreds 10^6 rollouts would take."""
    bench, box, _ = _pend_all(1.5)
    calls = []

    def stop() -> bool:
        calls.append(1)
        return True

    found = search_segment(bench, box, np.random.default_rng(0), evals=10**6, horizon=12, stop=stop)
    assert len(calls) == 1 and found.rollouts == 2 * 15 * 14  # the first population and one more


def _slow_escape():
    """a' = a + 0.04·clip(u), u = −0.5·a + β with the bias β ∈ [−1, 1]: from X0 = |a| ≤ 0.3 the
    push β = 1 reaches |a| ≥ 1.2 in about 35 steps and no fewer than 23 (0.9 / 0.04)."""
    from safecert.bnn.config import DynamicsConfig, SetsConfig
    from safecert.bnn.networks import ReluNetwork
    from safecert.bnn.spec import WeightBox

    dyn = DynamicsConfig(
        state=["a", "b"], action=["u"], next={"a": "a + 0.04 * clip(u, -1, 1)", "b": "b"}
    )
    sets = SetsConfig.model_validate(
        {
            "domain": {"a": [-1.2, 1.2], "b": [-1.2, 1.2]},
            "initial": {"box": {"a": [-0.3, 0.3], "b": [-0.3, 0.3]}},
            "unsafe": {"outside": {"a": [-1.2, 1.2], "b": [-1.2, 1.2]}},
        }
    )
    w = np.array([[-0.5], [0.0]])
    mean = ReluNetwork([(w, np.zeros(1))])
    box = WeightBox(mean, ((w, np.array([-1.0])),), ((w, np.array([1.0])),))
    return build_system("slow", dyn, sets), box


def test_adaptive_horizon_finds_an_escape_the_first_horizon_cannot_reach():
    """Issue 25: the default horizon (12) missed escapes of 25–35 steps. Rollouts of 24 and 48
    steps (λ held for 2 and 4 steps) find this one; with the adaptive stages off, none is found."""
    bench, box = _slow_escape()
    rng = lambda: np.random.default_rng(0)  # noqa: E731
    assert find_witness(bench, box, rng(), evals=4000, horizon=12, max_horizon=12) is None
    w = find_witness(bench, box, rng(), evals=4000, horizon=12, max_horizon=48)
    assert w is not None and 23 <= len(w.weights) <= 48
    assert replay_witness(bench, box, w.path[0], [list(s) for s in w.weights]) is not None
    assert f"in {len(w.weights)} steps" in w.describe()


def test_max_horizon_below_the_horizon_is_one_line():
    import pytest

    from safecert.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^data: witness_max_horizon \(10\) is below") as err:
        benchmark_config("lds", data={"witness_horizon": 20, "witness_max_horizon": 10})
    assert "\n" not in str(err.value)
    assert benchmark_config("lds").data.witness_max_horizon == 48
