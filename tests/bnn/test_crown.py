"""CROWN-style bounds over interval weights (issue 25.5) against independent computations.

* dense sampling: states (box corners and uniform points) and weights drawn anew for every state
  (uniform in the box, random vertices, the two corners) never leave the bounds, in every layer,
  with signed inputs and every layer Bayesian (biases too), and on the packaged policies;
* the exact MILP: the largest and smallest output over the encoding with interval big-M
  constants lie inside the CROWN bound, and the encoding that prunes the neurons CROWN proves
  stable (:func:`encode_network`) has fewer binaries and the same optima.
"""

from __future__ import annotations

import numpy as np
import pytest

from safecert.bnn.bounds import crown_bounds, network_bounds
from safecert.bnn.config import bayesian_spec
from safecert.bnn.encoding import Bounded, encode_network, interval_layer, relu, state_vars
from safecert.bnn.networks import ReluNetwork, load_policy
from safecert.bnn.setup import benchmark_config
from safecert.bnn.solvers import Milp, solve
from safecert.bnn.spec import BayesianSpec, WeightBox, parse_epsilon
from safecert.bnn.system import get_benchmark
from tests.bnn._toy import pre_activations


def _random_box(rng: np.random.Generator, widths: tuple[int, ...], sigma: float) -> WeightBox:
    net = ReluNetwork(
        [
            (rng.normal(size=(a, b)), rng.normal(size=b))
            for a, b in zip(widths[:-1], widths[1:], strict=True)
        ]
    )
    n = len(widths) - 1
    return BayesianSpec((sigma,) * n, (True,) * n, bayesian_biases=True).box(net, "1sigma")


def _draws(box: WeightBox, rng: np.random.Generator, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per-state weights (leading axis n): a third uniform, a third vertices, a third corners."""
    out = []
    for (wl, bl), (wu, bu) in zip(box.lower, box.upper, strict=True):
        kind = rng.integers(0, 3, size=n)
        t_w = rng.uniform(size=(n, *wl.shape))
        t_b = rng.uniform(size=(n, *bl.shape))
        vert_w = rng.integers(0, 2, size=t_w.shape).astype(float)
        vert_b = rng.integers(0, 2, size=t_b.shape).astype(float)
        corner = rng.integers(0, 2, size=n).astype(float)
        t_w = np.where((kind == 1)[:, None, None], vert_w, t_w)
        t_b = np.where((kind == 1)[:, None], vert_b, t_b)
        t_w = np.where((kind == 2)[:, None, None], corner[:, None, None], t_w)
        t_b = np.where((kind == 2)[:, None], corner[:, None], t_b)
        out.append((wl + t_w * (wu - wl), bl + t_b * (bu - bl)))
    return out


def _per_state_pre(layers: list[tuple[np.ndarray, np.ndarray]], x: np.ndarray) -> list[np.ndarray]:
    a, out = x, []
    for k, (w, b) in enumerate(layers):
        z = np.einsum("ni,nij->nj", a, w) + b
        out.append(z)
        a = np.maximum(z, 0.0) if k < len(layers) - 1 else z
    return out


def _states(rng: np.random.Generator, lo: np.ndarray, hi: np.ndarray, n: int) -> np.ndarray:
    corners = np.array(np.meshgrid(*zip(lo, hi, strict=True))).reshape(len(lo), -1).T
    return np.vstack([corners, rng.uniform(lo, hi, size=(n, len(lo)))])


def _assert_inside(bounds, zs) -> None:
    for k, (b, z) in enumerate(zip(bounds, zs, strict=True)):
        assert np.all(z >= b.z_lo), f"layer {k}: {np.min(z - b.z_lo)} below the lower bound"
        assert np.all(z <= b.z_hi), f"layer {k}: {np.max(z - b.z_hi)} above the upper bound"


@pytest.mark.parametrize("seed", range(6))
def test_crown_bounds_hold_for_weights_drawn_per_state(seed: int) -> None:
    rng = np.random.default_rng(seed)
    widths = ((3, 8, 6, 2), (2, 5, 5, 5, 1), (4, 10, 1))[seed % 3]
    box = _random_box(rng, widths, sigma=0.3)
    lo = rng.uniform(-2.0, 0.5, size=widths[0])
    hi = lo + rng.uniform(0.1, 2.0, size=widths[0])
    x = _states(rng, lo, hi, 20_000)
    crown = crown_bounds(box, lo, hi)
    both = network_bounds(box, lo, hi)
    _assert_inside(crown, _per_state_pre(_draws(box, rng, len(x)), x))
    _assert_inside(both, _per_state_pre(_draws(box, rng, len(x)), x))
    for layers in (box.sample_uniform(rng) for _ in range(20)):  # one network for all states
        _assert_inside(crown, pre_activations(layers, x))


@pytest.mark.parametrize("name", ["lds", "lds_all", "pend_all", "car_all", "lane", "cartpole"])
def test_crown_bounds_hold_on_the_packaged_policies(name: str) -> None:
    rng = np.random.default_rng(7)
    net = load_policy(name)
    box = bayesian_spec(benchmark_config(name), net).box(net, parse_epsilon("2sigma"))
    bench = get_benchmark(name)
    x = _states(rng, bench.box.lo, bench.box.hi, 30_000)
    crown = network_bounds(box, bench.box.lo, bench.box.hi)
    _assert_inside(crown, _per_state_pre(_draws(box, rng, len(x)), x))
    loose = network_bounds(box, bench.box.lo, bench.box.hi, crown=False)
    for a, b in zip(loose, crown, strict=True):  # never looser than intervals
        assert np.all(b.z_lo >= a.z_lo) and np.all(b.z_hi <= a.z_hi)


def test_crown_is_tighter_than_intervals_after_the_first_layer() -> None:
    net = load_policy("lds")
    box = bayesian_spec(benchmark_config("lds"), net).box(net, parse_epsilon("2sigma"))
    bench = get_benchmark("lds")
    loose = network_bounds(box, bench.box.lo, bench.box.hi, crown=False)
    tight = network_bounds(box, bench.box.lo, bench.box.hi)
    assert (tight[1].z_hi - tight[1].z_lo)[0] < 0.9 * (loose[1].z_hi - loose[1].z_lo)[0]


def _loose_encoding(milp: Milp, box: WeightBox, x: Bounded) -> Bounded:
    """The encoding with interval big-M constants only (the one before CROWN)."""
    a, last = x, len(box.lower) - 1
    for k, ((wl, bl), (wu, bu)) in enumerate(zip(box.lower, box.upper, strict=True)):
        z = interval_layer(milp, a, wl, wu, bl, bu)
        if k < last:
            a = relu(milp, z)
    return z


@pytest.mark.parametrize("seed", [3, 4, 16, 18])  # instances where CROWN prunes a neuron
def test_milp_optimum_is_inside_crown_and_unchanged_by_pruning(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    box = _random_box(rng, (2, 6, 6, 1), sigma=0.05)
    lo, hi = -np.ones(2), np.array([1.0, 0.5])
    crown = crown_bounds(box, lo, hi)[-1]
    optima, binaries = {}, {}
    for variant in ("loose", "pruned"):
        for maximize in (True, False):
            milp = Milp()
            x = state_vars(milp, lo, hi)
            out = (
                _loose_encoding(milp, box, x)
                if variant == "loose"
                else encode_network(milp, box, x).out
            )
            milp.set_objective(out.idx, [1.0], maximize=maximize)
            res = solve(milp, "highs", time_limit_s=60, gap=1e-9)
            assert res.status == "feasible" and res.optimal
            optima[variant, maximize] = float(res.objective)
            binaries[variant] = milp.n_integer
    assert binaries["pruned"] < binaries["loose"]
    for maximize in (True, False):
        assert optima["pruned", maximize] == pytest.approx(optima["loose", maximize], abs=1e-6)
    assert crown.z_lo[0] <= optima["loose", False] + 1e-6
    assert optima["loose", True] <= crown.z_hi[0] + 1e-6


def test_bounds_that_prove_nothing_leave_the_encoding_as_it_was() -> None:
    """On the packaged lds policy CROWN proves no hidden neuron stable: the MILP is the interval one."""
    net = load_policy("lds")
    box = bayesian_spec(benchmark_config("lds"), net).box(net, parse_epsilon("1sigma"))
    bench = get_benchmark("lds")
    a, b = Milp(), Milp()
    _loose_encoding(a, box, state_vars(a, bench.box.lo, bench.box.hi))
    encode_network(b, box, state_vars(b, bench.box.lo, bench.box.hi))
    assert (a.lb, a.ub, a.integer) == (b.lb, b.ub, b.integer)
    assert all(
        np.array_equal(r[0], s[0]) and np.array_equal(r[1], s[1]) and r[2:] == s[2:]
        for r, s in zip(a.rows, b.rows, strict=True)
    )
