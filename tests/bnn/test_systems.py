"""Systems as data: sets encoded exactly, the examples equal the packaged tables, bad tables refused."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest

from safecert.bnn.config import BnnConfig, DynamicsConfig, SetsConfig
from safecert.bnn.encoding import encode_network, state_vars
from safecert.bnn.networks import ReluNetwork
from safecert.bnn.sets import Box
from safecert.bnn.setup import load_config
from safecert.bnn.solvers import Milp, solve
from safecert.bnn.system import benchmark_tables, build_system, get_benchmark
from safecert.errors import ConfigError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "bnn"
DYN = DynamicsConfig(state=["x", "v"], action=["u"], next={"x": "x + 0.1 * v", "v": "v + 0.1 * u"})
DOMAIN = {"x": [-2, 2], "v": [-1, 1]}


def _system(initial: dict, unsafe: dict, **extra: object):
    sets = SetsConfig.model_validate(
        {"domain": DOMAIN, "initial": initial, "unsafe": unsafe, **extra}
    )
    return build_system("t", DYN, sets)


def _milp_extremes(piece, direction: np.ndarray) -> float:
    """max direction·x over one MILP piece (box bounds + rows), as the verifier encodes it."""
    milp = Milp()
    x = state_vars(milp, piece.box.lo, piece.box.hi)
    for a, b in zip(piece.rows.A, piece.rows.b, strict=True):
        milp.add_row(x.idx, a, hi=float(b))
    milp.set_objective(x.idx, direction)
    res = solve(milp, gap=0.0)
    assert res.optimal
    return float(res.objective)


def test_box_union_polytope_and_complement_are_exact() -> None:
    """Membership of the compiled region equals an independent formula on a dense grid, and the
    MILP's extremes over the pieces equal the brute-force extremes over the grid's members."""
    s = _system(
        {
            "union": [
                {"box": {"x": [-0.5, 0.0], "v": [-0.2, 0.2]}},
                {"box": {"x": [0.2, 0.4], "v": [0, 0.5]}},
            ]
        },
        {"outside": {"x": [-1.5, 1.5], "v": [-0.8, 0.8]}},
    )
    g = np.stack(np.meshgrid(np.linspace(-2, 2, 161), np.linspace(-1, 1, 81)), -1).reshape(-1, 2)
    x, v = g[:, 0], g[:, 1]
    init = ((-0.5 <= x) & (x <= 0) & (np.abs(v) <= 0.2)) | (
        (0.2 <= x) & (x <= 0.4) & (0 <= v) & (v <= 0.5)
    )
    unsafe = (np.abs(x) >= 1.5) | (np.abs(v) >= 0.8)
    np.testing.assert_array_equal(s.in_initial(g), init)
    np.testing.assert_array_equal(s.in_unsafe(g), unsafe)
    poly = _system(
        {"polytope": ["x + v <= 0.5", "x - v >= -0.5", "x >= -0.25", "v >= -0.3"]},
        {"polytope": ["v >= 0.9 - 0.1 * x"]},
    )
    inside = (x + v <= 0.5) & (x - v >= -0.5) & (x >= -0.25) & (v >= -0.3)
    np.testing.assert_array_equal(poly.in_initial(g), inside)
    np.testing.assert_array_equal(poly.in_unsafe(g), v >= 0.9 - 0.1 * x - 1e-12)
    for d in ([1.0, 0.0], [0.0, -1.0], [1.0, 1.0], [-1.0, 2.0]):
        d = np.array(d)
        got = max(_milp_extremes(p, d) for p in poly.initial.pieces)
        assert got == pytest.approx(np.max(g[inside] @ d), abs=0.03)  # grid spacing 0.025
        got_u = max(_milp_extremes(p, d) for p in s.unsafe.pieces)
        assert got_u == pytest.approx(np.max(g[unsafe] @ d), abs=1e-9)
    samples = poly.sample_initial(np.random.default_rng(0), 500)
    assert len(samples) == 500 and poly.in_initial(samples).all()


def test_the_unsafe_check_sees_every_piece() -> None:
    """g ≥ 0 only near (1.9, 0.95), inside a single piece of the complement: found there."""
    from safecert.bnn.spec import BayesianSpec
    from safecert.bnn.verifier import Counterexample, Verifier

    s = _system(
        {"box": {"x": [-0.1, 0.1], "v": [-0.1, 0.1]}},
        {"outside": {"x": [-1.5, 1.5], "v": [-0.8, 0.8]}},
    )
    g = ReluNetwork([(np.array([[1.0], [1.0]]), np.array([-2.8]))])  # g = x + v − 2.8
    pol = ReluNetwork([(np.zeros((2, 1)), np.zeros(1))])
    box = BayesianSpec((0.1,), (True,)).box(pol, "0sigma")
    verdict = Verifier(s, box).check_unsafe(g)
    assert isinstance(verdict, Counterexample) and verdict.x[0] + verdict.x[1] >= 2.8 - 1e-9
    milp = Milp()
    x = state_vars(milp, [-2, -1], [2, 1])
    assert encode_network(milp, g, x).out.size == 1


@pytest.mark.parametrize("name", ["lds", "pend", "car"])
def test_examples_hold_the_packaged_systems(name: str) -> None:
    doc = tomllib.loads((EXAMPLES / f"{name}.toml").read_text())
    tables = benchmark_tables(name)
    assert doc["dynamics"] == tables["dynamics"] and doc["sets"] == tables["sets"]
    cfg = load_config(EXAMPLES / f"{name}.toml")
    assert isinstance(cfg, BnnConfig)


def test_lds_default_is_the_papers_x0_and_the_published_one_is_named() -> None:
    lds, x04 = get_benchmark("lds"), get_benchmark("lds_x04")
    assert lds.initial.pieces[0].box.hi.tolist() == [0.6, 0.6] and x04.initial.pieces[
        0
    ].box.hi.tolist() == [
        0.4,
        0.4,
    ]
    assert get_benchmark("pend").initial.pieces[0].box.hi[0] == pytest.approx(np.pi / 6, abs=1e-15)


@pytest.mark.parametrize(
    ("sets", "field"),
    [
        ({"initial": {"box": {"x": [0, 1]}}}, "sets.initial.box.v: is missing"),
        (
            {"initial": {"box": {"x": [0, 1], "v": [0, 1], "z": [0, 1]}}},
            "sets.initial.box.z: unknown variable",
        ),
        ({"initial": {"box": {"x": [0, 1], "v": [0, 1, 2]}}}, "sets.initial.box.v: got 3 values"),
        ({"initial": {"box": {"x": [1, 0], "v": [0, 1]}}}, "sets.initial.box.x: lower end"),
        ({"initial": {"box": {"x": [0, 3], "v": [0, 1]}}}, "sets.initial.box: is not inside"),
        ({"initial": {"polytope": ["x * v <= 1"]}}, "sets.initial.polytope[0]"),
        ({"initial": {"polytope": ["x <= 1"]}}, "sets.initial.polytope: is not inside"),
        ({"initial": {"polytope": ["x < 1"]}}, "not one inequality"),
        ({"unsafe": {"polytope": ["x >= 5"]}}, "does not meet the domain"),
        ({"initial": {"box": {"x": ["pi", "nope"], "v": [0, 1]}}}, "sets.initial.box.x"),
    ],
)
def test_bad_sets_are_one_line_naming_the_field(sets: dict, field: str) -> None:
    data = {
        "domain": DOMAIN,
        "initial": {"box": {"x": [0, 1], "v": [0, 1]}},
        "unsafe": {"outside": DOMAIN},
    }
    data.update(sets)
    with pytest.raises(ConfigError) as err:
        build_system("t", DYN, SetsConfig.model_validate(data))
    assert field in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("dyn", "field"),
    [
        ({"next": {"x": "x + w", "v": "v"}}, "dynamics.next.x: unknown variable 'w'"),
        ({"next": {"x": "x"}}, "dynamics.next: missing ['v']"),
        ({"next": {"x": "x", "v": "v", "y": "y"}}, "dynamics.next"),
        ({"next": {"x": "sin(x)", "v": "v"}}, "dynamics.next.x: function 'sin'"),
        ({"next": {"x": "x * v", "v": "v"}}, "product of two variables"),
        ({"next": {"x": "relu(x, v)", "v": "v"}}, "relu takes 1 arguments, got 2"),
        ({"state": ["x", "x"]}, "dynamics.state: 'x' is declared twice"),
        ({"action": ["clip"]}, "dynamics.action: 'clip' is not a usable name"),
        ({"choices": [[0.0], [1.0, 2.0]]}, "dynamics.choices"),
    ],
)
def test_bad_dynamics_are_one_line_naming_the_field(dyn: dict, field: str) -> None:
    base = {"state": ["x", "v"], "action": ["u"], "next": {"x": "x", "v": "v"}}
    base.update(dyn)
    sets = SetsConfig.model_validate(
        {
            "domain": DOMAIN,
            "initial": {"box": {"x": [0, 1], "v": [0, 1]}},
            "unsafe": {"outside": DOMAIN},
        }
    )
    with pytest.raises(ConfigError) as err:
        build_system("t", DynamicsConfig(**base), sets)
    assert field in str(err.value) and "\n" not in str(err.value)


def test_step_domain_makes_states_terminal() -> None:
    car = get_benchmark("car")
    x = np.array([[0.0, 1.0, 0.0], [0.0, 1.0, 1.0]])
    np.testing.assert_array_equal(
        car.step(x, np.array([[0, 5.0, 0], [0, 5.0, 0]])), [[0, 1, 0], [1, 1, 0]]
    )
    assert Box([-2, -2, 1], [2, 2, 5]).inside(car.box)


@pytest.mark.parametrize(
    ("initial", "unsafe", "shared"),
    [
        ({"box": {"x": [0.5, 1.5], "v": [0, 0.5]}}, {"box": {"x": [1, 2], "v": [-1, 1]}}, "x = 1"),
        # closed sets: touching is sharing (the unsafe check asks g(x) ≥ 0 on all of X_u)
        ({"box": {"x": [0, 1], "v": [0, 1]}}, {"outside": DOMAIN}, "v = 1"),
        (
            {"polytope": ["x + v <= 1", "x >= 0", "v >= 0"]},
            {"polytope": ["x + v >= 0.9"]},
            "share the state",
        ),
    ],
)
def test_x0_overlapping_xu_is_one_line_not_a_trajectory(
    initial: dict, unsafe: dict, shared: str
) -> None:
    """X0 ∩ X_u ≠ ∅: nothing can be certified whatever the policy; said at once (it was reported
    as "reaches X_u in 1 steps" after a witness search)."""
    with pytest.raises(ConfigError) as err:
        _system(initial, unsafe)
    text = str(err.value)
    assert text.startswith("sets.initial: X0 overlaps X_u") and shared in text, text
    assert "\n" not in text
    _system({"box": {"x": [0, 0.5], "v": [0, 0.5]}}, {"box": {"x": [0.6, 2], "v": [-1, 1]}})


def test_integer_x0_overlaps_only_at_integer_points() -> None:
    dyn = DynamicsConfig(
        state=["x", "v"], action=["a"], choices=[[0], [1]], integer=True,
        next={"x": "x + a", "v": "v"},
    )  # fmt: skip
    sets = {"domain": {"x": [-3, 3], "v": [-3, 3]}}
    near = {"initial": {"polytope": ["x + v <= 1.5", "x >= 0", "v >= 0"]},
            "unsafe": {"polytope": ["x + v >= 1.7"]}}  # fmt: skip
    build_system("t", dyn, SetsConfig.model_validate(sets | near))  # no integer point in common
    with pytest.raises(ConfigError, match="X0 overlaps X_u"):
        build_system(
            "t",
            DYN,
            SetsConfig.model_validate(sets | near | {"unsafe": {"polytope": ["x + v >= 1.4"]}}),
        )


def test_user_text_is_echoed_and_negative_epsilon_says_so() -> None:
    from safecert.bnn.spec import parse_epsilon

    with pytest.raises(ConfigError) as err:
        _system({"polytope": ["x * v <= 1"]}, {"outside": DOMAIN})
    assert "in 'x * v <= 1'" in str(err.value)  # the user's inequality, not '(x * v ) - ( 1)'
    for text in ("-0.1", "-0.1sigma"):
        with pytest.raises(ConfigError) as err:
            parse_epsilon(text)
        assert str(err.value).startswith(f"epsilon: epsilon must be finite and ≥ 0, got '{text}'")
    with pytest.raises(ConfigError, match="cannot read epsilon 'abc'"):
        parse_epsilon("abc")
