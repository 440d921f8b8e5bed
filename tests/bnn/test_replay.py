"""Float64 replay of MILP witnesses."""

from __future__ import annotations

import numpy as np

from safecert.bnn.networks import ReluNetwork, forward, load_policy
from safecert.bnn.replay import (
    realise_weights,
    replay_closure,
    replay_initial,
    replay_output,
    replay_unsafe,
    snap_state,
)
from safecert.bnn.sets import Box, Polytope
from safecert.bnn.spec import BayesianSpec, default_spec
from safecert.bnn.system import get_benchmark
from tests.bnn._toy import pre_activations


def test_realised_weights_hit_reachable_targets_and_stay_in_the_box() -> None:
    rng = np.random.default_rng(0)
    net = ReluNetwork(
        [
            (rng.normal(size=(3, 5)), rng.normal(size=5)),
            (rng.normal(size=(5, 2)), rng.normal(size=2)),
        ]
    )
    box = BayesianSpec((0.2, 0.3), (True, True), bayesian_biases=True).box(net, "1sigma")
    for _ in range(50):
        x = rng.uniform(-2, 2, size=3)
        truth = box.sample_uniform(rng)
        targets = pre_activations(truth, x)
        weights = realise_weights(box, x, targets)
        assert box.contains(weights)
        for z, t in zip(pre_activations(weights, x), targets, strict=True):
            np.testing.assert_allclose(z, t, atol=1e-10)
    far = [np.full(5, 1e3), np.full(2, -1e3)]  # unreachable targets are clipped to the extremes
    assert box.contains(realise_weights(box, x, far))


def test_closure_replay_accepts_real_and_rejects_fake_violations() -> None:
    bench = get_benchmark("lds")
    net = load_policy("lds")
    box = default_spec("lds").box(net, "0sigma")
    g = ReluNetwork([(np.array([[1.0], [0.0]]), np.array([0.0]))])  # g(x) = x_0
    x = np.array([0.05, -1.0])  # y is very negative: x_0' = x_0 + 0.3·y' + … < 0
    rep = replay_closure(bench, box, g, x, pre_activations(net.layers, x))
    assert rep.ok and rep.g_x >= 0 > rep.g_next
    np.testing.assert_allclose(rep.x_next, bench.step(x, net.forward(x)))
    x_good = np.array([0.5, 0.5])
    assert not replay_closure(bench, box, g, x_good, pre_activations(net.layers, x_good)).ok


def test_initial_and_unsafe_replay() -> None:
    bench = get_benchmark("lds")
    g = ReluNetwork([(np.array([[1.0], [0.0]]), np.array([0.0]))])
    assert replay_initial(bench, g, np.array([-0.3, 0.0]), 0).ok
    assert not replay_initial(bench, g, np.array([0.3, 0.0]), 0).ok
    # a solver point 1e-9 short of the face x_0 = 1.2 is snapped onto it
    rep = replay_unsafe(bench, g, np.array([1.2 - 1e-9, 0.3]), 0)
    assert rep.ok and rep.x[0] == 1.2
    assert not replay_unsafe(bench, g, np.array([-1.2, 0.3]), 1).ok


def test_snap_state_rounds_integer_states() -> None:
    bench = get_benchmark("car")
    np.testing.assert_array_equal(
        snap_state(np.array([1.0000001, -2.0000002, 3.4999]), bench.box, True), [1, -2, 3]
    )


def test_output_replay() -> None:
    net = ReluNetwork([(np.array([[1.0]]), np.array([0.0]))])
    box = BayesianSpec((0.1,), (True,)).box(net, "1sigma")
    x = np.array([2.0])
    targets = [np.array([2.2])]  # reachable with w = 1.1
    rep = replay_output(
        box, x, targets, Box([-3.0], [3.0]), Polytope(np.array([[-1.0]]), np.array([-2.15]))
    )
    assert rep.ok and abs(forward(rep.weights, x)[0] - 2.2) < 1e-12 and box.contains(rep.weights)


def test_realised_weights_at_the_upper_end_stay_in_the_box() -> None:
    """``−0.933 + 1·(0.715 + 0.933)`` is 0.7150000000000001 in float64: without clipping, a target
    at the top of its interval gave weights one ulp outside the box, and a real witness was
    discarded."""
    from safecert.bnn.replay import realise_weights
    from safecert.bnn.spec import WeightBox

    mean = ReluNetwork([(np.array([[0.0]]), np.array([0.0]))])
    lo = ((np.array([[-0.933]]), np.array([0.0])),)
    hi = ((np.array([[0.715]]), np.array([0.0])),)
    assert -0.933 + 1.0 * (0.715 + 0.933) > 0.715  # the rounding this guards against
    box = WeightBox(mean, lo, hi)
    x = np.array([1.0])
    w = realise_weights(box, x, [np.array([0.715])])
    assert box.contains(w) and w[0][0][0, 0] == 0.715
