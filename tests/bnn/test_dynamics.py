"""The three paper systems as TOML: float64 dynamics, sets, and MILP step encodings, checked against
the published code's formulas and the former hand-written encoders (tests/bnn/_oracles.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from safecert.bnn.dynamics import rollout
from safecert.bnn.encoding import state_vars
from safecert.bnn.networks import load_policy
from safecert.bnn.solvers import Milp, solve
from safecert.bnn.system import get_benchmark
from safecert.errors import ConfigError
from tests.bnn._oracles import ENCODERS, STEPS, angular


def _angular_paper(x: float) -> float:
    """The paper's recursive case definition (Appendix C), written independently."""
    if x <= math.pi / 2:
        return _angular_paper(x + 2 * math.pi)
    if x > 5 * math.pi / 2:
        return _angular_paper(x - 2 * math.pi)
    if x > 3 * math.pi / 2:
        return (x - 2 * math.pi) / (math.pi / 2)
    return 2 - x / (math.pi / 2)


def test_lds_mean_policy_trajectory_matches_published_code() -> None:
    bench, net = get_benchmark("lds_x04"), load_policy("lds")
    xs = rollout(bench, net, np.array([0.4, 0.4]), 200)
    np.testing.assert_allclose(xs[-1], [-0.0275, -0.0526], atol=5e-4)
    assert not bench.in_unsafe(xs).any()


def test_lds_step_closed_form() -> None:
    x = np.array([[0.3, -0.2], [1.0, 1.0]])
    u = np.array([[0.5], [-7.0]])
    y1 = x[:, 1] + 0.2 * np.array([0.5, -1.0])
    x1 = x[:, 0] + 0.3 * y1 + 0.05 * np.array([0.5, -1.0])
    np.testing.assert_allclose(get_benchmark("lds").step(x, u), np.stack([x1, y1], 1), rtol=1e-15)


def test_angular_matches_paper_definition_and_sine_at_nodes() -> None:
    xs = np.linspace(-10, 10, 2001)
    np.testing.assert_allclose(angular(xs), [_angular_paper(float(v)) for v in xs], atol=1e-12)
    nodes = np.array([0, np.pi / 2, np.pi, 3 * np.pi / 2, -np.pi / 2])
    np.testing.assert_allclose(angular(nodes), np.sin(nodes), atol=1e-12)


def test_pendulum_step_follows_published_code() -> None:
    th, thdot, u = 0.3, 7.9, 3.0
    new_thdot = (
        thdot + (-3 * 10.0 / 2 * _angular_paper(th + math.pi) + 3.0 / 0.8 * 2.5 * 1.0) * 0.05
    )
    new_th = th + new_thdot * 0.05
    out = get_benchmark("pend").step(np.array([th, thdot]), np.array([u]))
    np.testing.assert_allclose(out, [new_th, min(new_thdot, 8.0)], rtol=1e-14)
    assert new_thdot > 8.0  # the velocity clip is exercised, θ uses the unclipped value


def test_car_step_argmax_clip_and_terminal() -> None:
    bench = get_benchmark("car")
    x = np.array([[2.0, 0.0, 5.0], [0.0, 1.0, 3.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    u = np.array([[0.0, 5.0, 1.0], [0.0, 1.0, 9.0], [3.0, 1.0, 2.0], [0.0, 9.0, 0.0]])
    np.testing.assert_array_equal(
        bench.step(x, u), [[2.0, 0.0, 4.0], [-1.0, 1.0, 2.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]
    )
    assert bench.in_unsafe(
        np.array([[1.0, 1.0, 0.0], [2.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    ).tolist() == [
        True,
        False,
        False,
    ]


def test_sets_and_samples() -> None:
    rng = np.random.default_rng(0)
    for name in ("lds", "pend", "car"):
        bench = get_benchmark(name)
        xu = bench.sample_unsafe(rng, 300)
        x0 = bench.sample_initial(rng, 300)
        assert (
            xu.shape == (300, bench.state_dim)
            and bench.in_unsafe(xu).all()
            and bench.in_box(xu).all()
        )
        assert bench.in_initial(x0).all() and not bench.in_unsafe(x0).any()
        if bench.integer:
            assert np.array_equal(xu, np.round(xu)) and np.array_equal(x0, np.round(x0))
    assert get_benchmark("pend_all").name == "pend"
    with pytest.raises(ConfigError, match="benchmark"):
        get_benchmark("acrobot")
    lds, lds04 = get_benchmark("lds"), get_benchmark("lds_x04")
    assert lds.in_initial(np.array([0.6, -0.6])) and not lds04.in_initial(np.array([0.5, 0.0]))


def _milp_step(
    bench, x: np.ndarray, u: np.ndarray, u_box: tuple[np.ndarray, np.ndarray]
) -> np.ndarray:
    """Fix x and u through a range of u bounds, solve the step encoding, return x'."""
    milp = Milp()
    xv = state_vars(milp, bench.step_box.lo, bench.step_box.hi, bench.integer)
    uv = state_vars(milp, *u_box)
    nxt = bench.encode_step(milp, xv, uv)
    for v, val in zip(np.concatenate([xv.idx, uv.idx]), np.concatenate([x, u]), strict=True):
        milp.add_row(np.array([v]), np.array([1.0]), val, val)
    res = solve(milp, feastol=1e-10)
    assert res.status == "feasible", res
    return nxt.value(res.values)


@pytest.mark.parametrize("name", ["lds", "pend", "car"])
def test_milp_step_encoding_agrees_with_float64_step(name: str) -> None:
    bench = get_benchmark(name)
    rng = np.random.default_rng(1)
    m = bench.n_actions
    u_box = (np.full(m, -3.0), np.full(m, 3.0))
    xs = bench.step_box.sample(rng, 12, bench.integer)
    for x in xs:
        u = rng.uniform(-3, 3, size=m)
        np.testing.assert_allclose(_milp_step(bench, x, u, u_box), bench.step(x, u), atol=1e-9)


def test_milp_pendulum_covers_several_triangle_segments() -> None:
    bench = get_benchmark("pend")
    for th in (-2.7, -1.6, -0.4, 0.0, 1.2, 1.58, 2.75):
        x = np.array([th, 3.9])
        u = np.array([0.7])
        np.testing.assert_allclose(
            _milp_step(bench, x, u, (np.array([-2.0]), np.array([2.0]))),
            bench.step(x, u),
            atol=1e-9,
        )


@pytest.mark.parametrize("name", ["lds", "pend", "car"])
def test_toml_systems_step_like_the_former_hand_simulators(name: str) -> None:
    bench = get_benchmark(name)
    rng = np.random.default_rng(7)
    x = bench.step_box.sample(rng, 5000, bench.integer)
    u = rng.uniform(-3, 3, size=(5000, bench.n_actions))
    np.testing.assert_allclose(bench.step(x, u), STEPS[name](x, u), rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["lds", "pend", "car"])
def test_toml_systems_encode_like_the_former_hand_encoders(name: str) -> None:
    """Same MILP image: the extremes of each x'_i over the whole step box and an action box agree
    with the hand encoder's (an independent encoding of the same maps)."""
    bench = get_benchmark(name)
    m = bench.n_actions
    for i in range(bench.state_dim):
        for maximize in (True, False):
            vals = []
            for encode in (bench.encode_step, ENCODERS[name]):
                milp = Milp()
                xv = state_vars(milp, bench.step_box.lo, bench.step_box.hi, bench.integer)
                uv = state_vars(milp, np.full(m, -2.0), np.full(m, 2.0))
                nxt = encode(milp, xv, uv)
                milp.set_objective([nxt.idx[i]], [1.0], maximize=maximize)
                res = solve(milp, gap=0.0)
                assert res.optimal
                vals.append(res.objective)
            assert vals[0] == pytest.approx(vals[1], abs=1e-7)
