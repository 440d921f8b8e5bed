"""MILP encoding of interval-weight ReLU networks: soundness vs brute force, exactness vs vertices."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from safecert.bnn.encoding import argmax_onehot, encode_network, piecewise_linear, state_vars
from safecert.bnn.networks import ReluNetwork, forward, load_policy
from safecert.bnn.problem1 import check_problem1, output_extreme
from safecert.bnn.replay import realise_weights
from safecert.bnn.sets import Box, Polytope
from safecert.bnn.solvers import Milp, solve
from safecert.bnn.spec import BayesianSpec, WeightBox, default_spec
from safecert.bnn.verifier import Counterexample, Proof


def _net(rng, widths):
    return ReluNetwork(
        [
            (rng.normal(size=(a, b)), rng.normal(size=b))
            for a, b in zip(widths[:-1], widths[1:], strict=True)
        ]
    )


def _box(net, bayesian, sigma=0.2, biases=True):
    spec = BayesianSpec(tuple(sigma if f else 0.0 for f in bayesian), tuple(bayesian), biases)
    return spec.box(net, "1sigma")


def _vertex_max(box: WeightBox, x: np.ndarray) -> np.ndarray:
    """max over every vertex of the weight box of the (scalar) output at each row of x."""
    free = []  # (layer, kind, flat index)
    for k, ((wl, bl), (wu, bu)) in enumerate(zip(box.lower, box.upper, strict=True)):
        free += [(k, 0, i) for i in np.flatnonzero(wl < wu)] + [
            (k, 1, i) for i in np.flatnonzero(bl < bu)
        ]
    assert len(free) <= 12
    best = np.full(x.shape[0], -np.inf)
    for choice in itertools.product((0, 1), repeat=len(free)):
        layers = [(wl.copy(), bl.copy()) for wl, bl in box.lower]
        for (k, kind, i), c in zip(free, choice, strict=True):
            if c:
                src = box.upper[k][kind].reshape(-1)
                layers[k][kind].reshape(-1)[i] = src[i]
        best = np.maximum(best, forward(layers, x)[:, 0])
    return best


def _max_at(box: WeightBox, x: np.ndarray) -> float:
    res, _, _ = output_extreme(box, Box(x, x), np.array([1.0]))
    assert res.status == "feasible" and res.optimal
    return float(res.objective)


@pytest.mark.parametrize(
    ("widths", "bayesian"),
    [((2, 4, 1), (True, False)), ((2, 4, 1), (False, True)), ((1, 3, 1), (True, True))],
    ids=["first-layer-bayesian-signed-input", "last-layer-bayesian", "both-layers"],
)
def test_max_over_weight_box_equals_vertex_enumeration_at_fixed_inputs(widths, bayesian) -> None:
    rng = np.random.default_rng(7)
    net = _net(rng, widths)
    box = _box(net, bayesian)
    xs = rng.uniform(-2, 2, size=(8, widths[0]))  # inputs of both signs
    expected = _vertex_max(box, xs)
    got = np.array([_max_at(box, x) for x in xs])
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_global_max_over_1d_input_agrees_with_vertex_grid() -> None:
    rng = np.random.default_rng(3)
    net = _net(rng, (1, 4, 1))
    box = _box(net, (True, False))  # Bayesian first layer, signed input x ∈ [−1, 1]
    grid = np.linspace(-1, 1, 4001)[:, None]
    grid_max = _vertex_max(box, grid).max()
    res, _, _ = output_extreme(box, Box([-1.0], [1.0]), np.array([1.0]))
    lipschitz = float(np.sum(np.abs(box.upper[0][0]) @ np.abs(box.upper[1][0])) + 1)
    assert grid_max - 1e-6 <= res.objective <= grid_max + lipschitz * (2 / 4000)
    assert res.bound >= grid_max - 1e-9


@pytest.mark.parametrize("tighten", [False, True])
def test_random_weights_and_inputs_never_beat_the_milp_bound_and_witness_replays(tighten) -> None:
    rng = np.random.default_rng(11)
    net = _net(rng, (2, 6, 5, 1))
    box = _box(net, (True, True, True), sigma=0.15)
    in_box = Box([-1.0, -0.5], [1.0, 1.5])
    res, x, enc = output_extreme(box, in_box, np.array([1.0]), tighten=tighten)
    assert res.status == "feasible" and res.optimal
    sampled = max(
        forward(box.sample_uniform(rng), rng.uniform(in_box.lo, in_box.hi, size=(200, 2))).max()
        for _ in range(300)
    )
    assert sampled <= res.bound + 1e-6
    # the witness replays: concrete weights in the box reach the MILP optimum at the MILP's x
    xv = x.value(res.values)
    weights = realise_weights(box, xv, [p.value(res.values) for p in enc.pre])
    assert box.contains(weights)
    assert forward(weights, xv)[0] == pytest.approx(res.objective, abs=1e-5)
    assert sampled <= res.objective + 1e-6


def test_tightened_and_plain_encodings_give_the_same_optimum() -> None:
    rng = np.random.default_rng(5)
    net = _net(rng, (2, 8, 8, 1))
    box = _box(net, (True, True, True), sigma=0.1)
    a, _, _ = output_extreme(box, Box([-1, -1], [1, 1]), np.array([-1.0]))
    b, _, _ = output_extreme(
        box, Box([-1, -1], [1, 1]), np.array([-1.0]), tighten=True, solver="scip"
    )
    assert a.objective == pytest.approx(b.objective, abs=1e-5)


def test_problem1_proof_and_counterexample_on_tiny_net() -> None:
    rng = np.random.default_rng(9)
    net = _net(rng, (1, 4, 1))
    box = _box(net, (True, True))
    in_box = Box([-1.0], [1.0])
    res, _, _ = output_extreme(box, in_box, np.array([1.0]))
    above = Polytope(np.array([[-1.0]]), np.array([-(res.bound + 0.01)]))  # y ≥ max + 0.01
    assert isinstance(check_problem1(box, in_box, [above]), Proof)
    reachable = Polytope(np.array([[-1.0]]), np.array([-(res.objective - 0.05)]))
    verdict = check_problem1(box, in_box, [above, reachable])
    assert isinstance(verdict, Counterexample) and verdict.replay.ok
    assert verdict.x_next[0] >= res.objective - 0.05 and box.contains(verdict.replay.weights)


def test_problem1_on_published_lds_policy_grows_with_epsilon() -> None:
    net = load_policy("lds")
    x0 = Box([-0.4, -0.4], [0.4, 0.4])
    widths = []
    for eps in ("0sigma", "2sigma"):
        box = default_spec("lds").box(net, eps)
        hi, _, _ = output_extreme(box, x0, np.array([1.0]))
        lo, _, _ = output_extreme(box, x0, np.array([-1.0]))
        widths.append(hi.objective + lo.objective)
        samples = forward(
            box.sample_uniform(np.random.default_rng(0)), x0.sample(np.random.default_rng(1), 2000)
        )
        assert samples.max() <= hi.bound + 1e-6 and -samples.min() <= lo.bound + 1e-6
    assert widths[1] > widths[0]


def test_stable_neurons_get_no_binaries() -> None:
    net = ReluNetwork(
        [(np.array([[1.0, -1.0, 1.0]]), np.array([5.0, -5.0, 0.0])), (np.ones((3, 1)), np.zeros(1))]
    )
    milp = Milp()
    encode_network(milp, net, state_vars(milp, [-1.0], [1.0]))
    assert milp.n_integer == 1  # only the third neuron straddles 0


def test_piecewise_linear_is_exact_between_and_beyond_kinks() -> None:
    def f(t):
        return np.abs(t - 0.3) - 2 * np.maximum(t - 1.0, 0) + 0.5

    rng = np.random.default_rng(2)
    for lo, hi in ((-2.0, 3.0), (0.5, 0.9), (1.2, 4.0)):
        for t in rng.uniform(lo, hi, size=4):
            milp = Milp()
            x = state_vars(milp, [lo], [hi])
            y = piecewise_linear(milp, x, f, kinks=(0.3, 1.0))
            milp.add_row(x.idx, [1.0], t, t)
            res = solve(milp)
            assert y.value(res.values)[0] == pytest.approx(f(t), abs=1e-7)


def test_argmax_onehot_selects_a_maximiser() -> None:
    milp = Milp()
    y = state_vars(milp, -np.ones(3), np.ones(3))
    b = argmax_onehot(milp, y)
    milp.add_row(y.idx, [1.0, 0.0, 0.0], 0.2, 0.2)
    milp.add_row(y.idx, [0.0, 1.0, 0.0], 0.7, 0.7)
    milp.add_row(y.idx, [0.0, 0.0, 1.0], -0.1, -0.1)
    milp.set_objective(b.idx, [1.0, 0.0, 1.0])  # try to pick a non-maximiser
    res = solve(milp)
    np.testing.assert_allclose(b.value(res.values), [0.0, 1.0, 0.0], atol=1e-9)


def test_argmax_gap_excludes_ties() -> None:
    def model(gap):
        milp = Milp()
        y = state_vars(milp, -np.ones(3), np.ones(3))
        b = argmax_onehot(milp, y, gap)
        for i, v in enumerate((0.5, 0.5, -1.0)):
            row = np.zeros(3)
            row[i] = 1.0
            milp.add_row(y.idx, row, v, v)
        return milp, b

    milp, b = model(0.0)
    milp.set_objective(b.idx, [0.0, 1.0, 0.0])
    assert solve(milp).objective == pytest.approx(1.0)  # a tie admits the second index too
    assert solve(model(1e-5)[0]).status == "infeasible"  # no strict winner
