"""The piecewise-linear dynamics language: one compiled object, the MILP's image equals the simulator's.

For every form, random constants, random states and random actions: with the inputs fixed (column
bounds lo = hi), the minimum and the maximum of each next-state column over the MILP both equal the
float64 simulator's value within 1e-9 (so the encoding's image is exactly that one point), including
states on clip bounds, pwl break points, abs/relu kinks and argmax ties (where the MILP admits every
maximiser, a superset of numpy's first index).
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from safecert.bnn.config import DynamicsConfig
from safecert.bnn.encoding import state_vars
from safecert.bnn.pwl import Call, Const, Linear, evaluate, parse
from safecert.bnn.solvers import Milp, solve
from safecert.bnn.system import compile_dynamics
from safecert.errors import ConfigError

FORMS = {
    "linear": "{a} * x - {b} * y + {c} * u + {d} - x / 4",
    "clip": "clip({a} * x + u, {lo}, {hi})",
    "min": "min(x, {a} * y, u - {b})",
    "max": "max({a} * x + {b}, y, -u)",
    "abs": "abs(x - {a} * y) - abs(u)",
    "relu": "relu({a} * u - x) + relu(y)",
    "pwl": "pwl(x + {a} * u, [-2, {lo}, {hi}, 2.5], [{b}, {c}, -1, {d}])",
    "nested": "clip(max(x, -{a} * y), -1, 1) + pwl(min(u, y), [-1, 1], [{b}, -{b}]) - abs(relu(x))",
}


def _dynamics(expr: str, choices: list[list[float]] | None = None):
    return compile_dynamics(
        DynamicsConfig(
            state=["x", "y"],
            action=["u"],
            choices=choices,
            define={"w": expr},
            next={"x": "w", "y": "y - 0.5 * w + x"},
        )
    )


def _image(dyn, x: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Min and max of every next-state column with x and u fixed exactly."""
    lo, hi = [], []
    for i in range(len(dyn.state)):
        ends = []
        for maximize in (False, True):
            milp = Milp()
            xv = state_vars(milp, x, x)
            uv = state_vars(milp, u, u)
            nxt = dyn.encode(milp, xv, uv)
            milp.set_objective([nxt.idx[i]], [1.0], maximize=maximize)
            res = solve(milp, gap=0.0, feastol=1e-10)
            assert res.status == "feasible" and res.optimal, res
            ends.append(float(res.values[nxt.idx[i]]))
        lo.append(ends[0])
        hi.append(ends[1])
    return np.array(lo), np.array(hi)


def _constants(rng: np.random.Generator) -> dict[str, float]:
    lo, hi = sorted(rng.uniform(-1.5, 2.0, size=2))
    a, b, c, d = np.round(rng.uniform(-3, 3, size=4), 3)
    return {"a": a, "b": b, "c": c, "d": d, "lo": round(lo, 3), "hi": round(hi, 3) + 0.01}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_milp_image_equals_simulator_for_every_form(form: str) -> None:
    rng = np.random.default_rng(zlib.crc32(form.encode()))
    worst = 0.0
    for _ in range(4):
        k = _constants(rng)
        dyn = _dynamics(FORMS[form].format(**k))
        xs = rng.uniform(-2, 2, size=(4, 2))
        corners = np.array([[k["lo"], k["hi"]], [0.0, 0.0], [k["hi"], k["lo"]]])
        for x in np.vstack([xs, corners]):
            u = rng.uniform(-2, 2, size=1) if rng.random() < 0.7 else np.array([x[0]])
            sim = dyn.simulate(x, u)
            lo, hi = _image(dyn, x, u)
            worst = max(worst, float(np.max(np.abs(lo - sim))), float(np.max(np.abs(hi - sim))))
    assert worst <= 1e-9, worst


def test_clip_and_pwl_corners_exactly() -> None:
    """States on clip bounds and every pwl break point (the encodings' kinks)."""
    dyn = _dynamics("clip(x, -0.5, 0.75) + pwl(y, [-1, 0, 0.5, 1], [2, -1, 1, 0])")
    for xv in (-0.5, 0.75, -2.0, 2.0):
        for yv in (-1.0, 0.0, 0.5, 1.0, -3.0, 3.0):
            x = np.array([xv, yv])
            sim = dyn.simulate(x, np.zeros(1))
            lo, hi = _image(dyn, x, np.zeros(1))
            assert np.max(np.abs(lo - sim)) <= 1e-9 and np.max(np.abs(hi - sim)) <= 1e-9


def test_argmax_choices_random_and_ties() -> None:
    choices = [[0.0], [1.0], [-1.0]]
    dyn = _dynamics("x + 0.5 * u", choices)
    rng = np.random.default_rng(3)
    for _ in range(12):  # no ties: the image is the simulator's point
        x, out = rng.uniform(-2, 2, size=2), rng.uniform(-3, 3, size=3)
        lo, hi = _image(dyn, x, out)
        sim = dyn.simulate(x, out)
        assert np.max(np.abs(lo - sim)) <= 1e-9 and np.max(np.abs(hi - sim)) <= 1e-9
    # a tie between outputs 1 and 2: the MILP admits both (u = +1 and u = −1), numpy takes index 1
    x, out = np.array([0.2, -0.3]), np.array([0.0, 2.0, 2.0])
    lo, hi = _image(dyn, x, out)
    assert dyn.simulate(x, out)[0] == pytest.approx(0.7)
    assert lo[0] == pytest.approx(0.2 - 0.5, abs=1e-9) and hi[0] == pytest.approx(0.7, abs=1e-9)


def test_simulator_is_the_tree_and_constants_fold() -> None:
    node = parse("2 * (x - 1) + 3 * x / 2 - pi * 0", ["x"], "f")
    assert isinstance(node, Linear) and node.const == -2.0 and node.terms[0][0] == 3.5
    assert parse("clip(5, 0, 1) + max(1, 2)", [], "f") == Const(3.0)
    call = parse("pwl(x, [0, 1], [0, 2])", ["x"], "f")
    assert isinstance(call, Call)
    v = np.array([-1.0, 0.25, 3.0])
    np.testing.assert_array_equal(evaluate(call, {"x": v}, v.shape), np.interp(v, [0, 1], [0, 2]))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x * y", "product of two variables"),
        ("sin(x)", "function 'sin' is not supported"),
        ("x + z", "unknown variable 'z'"),
        ("clip(x, 0)", "clip takes 3 arguments, got 2"),
        ("clip(x, y, 1)", "must be a constant"),
        ("clip(x, 1, 0)", "clip bounds"),
        ("pwl(x, [1, 0], [0, 1])", "strictly increasing"),
        ("pwl(x, [0, 1], [0])", "equal length"),
        ("min(x)", "two or more"),
        ("x ** 2", "operator Pow"),
        ("x / y", "divides by a non-constant"),
        ("True + x", "not a number"),
        ("1e400 * x", "not finite"),
        ("x if y else 1", "IfExp"),
        ("__import__('os')", "function '__import__' is not supported"),
        ("(" * 200 + "x" + ")" * 200, "nested deeper"),
        ("x + " * 2000 + "x", "longer than"),
        ("x +", "cannot parse"),
    ],
)
def test_outside_the_language_is_one_line_naming_the_field(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        parse(text, ["x", "y"], "dynamics.next.x")
    line = str(err.value)
    assert line.startswith("dynamics.next.x: ") and "\n" not in line


def test_integer_system_rejects_non_integer_maps() -> None:
    base = {"state": ["p"], "action": ["u"], "choices": [0, 1], "integer": True}
    compile_dynamics(DynamicsConfig(**base, next={"p": "clip(p + u, -2, 2)"}))
    with pytest.raises(ConfigError, match="dynamics.next.p: does not map integers"):
        compile_dynamics(DynamicsConfig(**base, next={"p": "p + 0.5 * u"}))
    with pytest.raises(ConfigError, match="dynamics.choices"):
        compile_dynamics(DynamicsConfig(**{**base, "choices": [0, 0.5]}, next={"p": "p"}))
