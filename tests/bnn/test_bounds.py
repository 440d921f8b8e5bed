"""Interval and LP bounds are sound for signed inputs in every layer (checked by sampling)."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from safecert.bnn.bounds import interval_product_sum, lp_tighten, network_bounds
from safecert.bnn.encoding import encode_network, state_vars
from safecert.bnn.networks import ReluNetwork
from safecert.bnn.solvers import Milp
from safecert.bnn.spec import BayesianSpec
from tests.bnn._toy import pre_activations

finite = st.floats(min_value=-5, max_value=5, allow_nan=False)


@given(finite, finite, finite, finite)
@settings(max_examples=200, deadline=None)
def test_interval_product_is_the_exact_range(a, b, c, d) -> None:
    wl, wu = min(a, b), max(a, b)
    xl, xu = min(c, d), max(c, d)
    lo, hi = interval_product_sum(
        np.array([xl]), np.array([xu]), np.array([[wl]]), np.array([[wu]])
    )
    corners = [w * x for w, x in itertools.product((wl, wu), (xl, xu))]
    assert lo[0] == min(corners) and hi[0] == max(corners)
    grid = np.outer(np.linspace(wl, wu, 9), np.linspace(xl, xu, 9))
    assert grid.min() >= lo[0] - 1e-12 and grid.max() <= hi[0] + 1e-12


def _random_box(rng, widths, sigma=0.3):
    net = ReluNetwork(
        [
            (rng.normal(size=(a, b)), rng.normal(size=b))
            for a, b in zip(widths[:-1], widths[1:], strict=True)
        ]
    )
    spec = BayesianSpec(
        tuple([sigma] * (len(widths) - 1)), tuple([True] * (len(widths) - 1)), bayesian_biases=True
    )
    return spec.box(net, "1sigma")


def test_network_bounds_sound_for_signed_inputs_and_all_layers_bayesian() -> None:
    rng = np.random.default_rng(0)
    box = _random_box(rng, (3, 8, 6, 2))
    lo, hi = -np.ones(3), np.array([1.0, 2.0, 0.5])
    bounds = network_bounds(box, lo, hi)
    for _ in range(300):
        layers = box.sample_uniform(rng)
        x = rng.uniform(lo, hi, size=(50, 3))
        for zb, z in zip(bounds, pre_activations(layers, x), strict=True):
            assert np.all(z >= zb.z_lo) and np.all(z <= zb.z_hi)


def test_lp_tightening_is_tighter_and_still_sound() -> None:
    rng = np.random.default_rng(1)
    box = _random_box(rng, (2, 10, 10, 1), sigma=0.05)
    milp = Milp()
    x = state_vars(milp, -np.ones(2), np.ones(2))
    loose = encode_network(milp, box, x)
    milp2 = Milp()
    x2 = state_vars(milp2, -np.ones(2), np.ones(2))
    tight = encode_network(milp2, box, x2, tighten=True)
    gained = False
    for a, b in zip(loose.pre, tight.pre, strict=True):
        assert np.all(b.lo >= a.lo) and np.all(b.hi <= a.hi)
        gained |= bool(np.any(b.hi < a.hi - 1e-6) or np.any(b.lo > a.lo + 1e-6))
    assert gained
    assert milp2.n_integer <= milp.n_integer
    for _ in range(300):
        layers = box.sample_uniform(rng)
        xs = rng.uniform(-1, 1, size=(50, 2))
        for zb, z in zip(tight.pre, pre_activations(layers, xs), strict=True):
            assert np.all(z >= zb.lo) and np.all(z <= zb.hi)


def test_lp_tighten_leaves_stable_columns_alone() -> None:
    milp = Milp()
    x = state_vars(milp, np.array([0.5, -2.0]), np.array([1.0, -1.0]))
    lo, hi = lp_tighten(milp, x.idx, x.lo, x.hi)
    np.testing.assert_array_equal(lo, x.lo)
    np.testing.assert_array_equal(hi, x.hi)
