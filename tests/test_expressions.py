"""The shared expression language: values against Python's own evaluator, the labels dialect
against the shield's parser, and every refusal as one ConfigError/EvalError line."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safecert.errors import ConfigError
from safecert.expressions import EvalError, as_number, parse

SCOPE = {"x": 1.5, "y": -2.0, "n": 3.0, "flag": True, "off": False}


def _py(text: str) -> object:
    """The same text under Python's evaluator (the language is a subset of Python's syntax)."""
    return eval(text, {"__builtins__": {}, "_abs": abs}, dict(SCOPE))  # noqa: S307 - test oracle


def _ours(text: str) -> object:
    return parse(text, "t", names=SCOPE).evaluate(SCOPE)


numbers = st.recursive(
    st.sampled_from(["x", "y", "n", "2", "0.5", "1e-1", "(x)"]),
    lambda c: st.one_of(
        st.tuples(c, st.sampled_from(["+", "-", "*"]), c).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        c.map(lambda e: f"(-{e})"),
        c.map(lambda e: f"abs({e})"),
    ),
    max_leaves=8,
)
booleans = st.recursive(
    st.one_of(
        st.sampled_from(["flag", "off", "true", "false"]),
        st.tuples(numbers, st.sampled_from(["<", "<=", ">", ">=", "==", "!="]), numbers).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"
        ),
    ),
    lambda c: st.one_of(
        st.tuples(c, st.sampled_from(["and", "or"]), c).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        c.map(lambda e: f"(not {e})"),
    ),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None)
@given(numbers)
def test_arithmetic_equals_pythons_own_evaluation(text):
    expected = _py(text.replace("abs(", "_abs("))
    assert math.isclose(float(_ours(text)), float(expected), rel_tol=1e-12, abs_tol=1e-12), text


@settings(max_examples=150, deadline=None)
@given(booleans)
def test_logic_equals_pythons_own_evaluation(text):
    expected = _py(text.replace("abs(", "_abs(").replace("true", "True").replace("false", "False"))
    got = _ours(text)
    assert isinstance(got, bool) and got == bool(expected), text


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("abs(obs[0]) > 2.4", True),
        ("obs[-1] ** 2", 0.25),
        ("max(obs) - min(obs)", 4.0),
        ("norm(obs)", math.sqrt(3.0**2 + 1.0 + 0.25)),
        ("clip(obs[0], -1, 1)", -1.0),
        ('terminated and info["success"]', True),
        ('info.get("cost", 0) + info.get("missing", 7)', 7.5),
        ("1 < t <= 5", True),
        ("t % 2 == 1 and not truncated", True),
        ("sum(obs > 0)", 2.0),
    ],
)
def test_known_values(text, value):
    scope = {
        "obs": np.array([-3.0, 1.0, 0.5]),
        "info": {"success": True, "cost": 0.5},
        "terminated": True,
        "truncated": False,
        "t": 3,
    }
    got = parse(text, "spec.cost", names=scope).evaluate(scope)
    assert got == pytest.approx(value)


label_names = st.sampled_from(["a", "b", "harm", "in-prod", "x.y", "s:1"])


def _label_expr(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    op = st.sampled_from(["and", "or", "&&", "||", "&", "|"])
    neg = st.sampled_from(["not ", "!", "~"])
    return st.one_of(
        st.tuples(children, op, children).map(lambda t: f"{t[0]} {t[1]} {t[2]}"),
        st.tuples(neg, children).map(lambda t: f"{t[0]}{t[1]}"),
        children.map(lambda c: f"({c})"),
    )


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("foo > 1", "unknown name 'foo'"),
        ("obs.__class__", "unknown method '__class__'"),
        ('info.get("cost")', "get() needs a default"),
        ("abs(obs, 1)", "abs() takes 1"),
        ("obs[0", "ends early"),
        ("obs[0 1]", "expected ']'"),
        ("1 +", "ends early"),
        ("obs[0] > 1 )", "unexpected ')'"),
        ("(" * 80 + "1" + ")" * 80, "nested deeper than 64"),
        ("1" * 10_001, "longer than 10000"),
        ("", "empty expression"),
        ("obs @ 2", "cannot parse"),
        ("__import__('os')", "unknown name '__import__'"),
    ],
)
def test_malformed_expressions_are_one_config_error(text, needle):
    with pytest.raises(ConfigError) as err:
        parse(text, "spec.cost", names=("obs", "info"))
    message = str(err.value)
    assert message.startswith("spec.cost: ") and needle in message and "\n" not in message


def test_missing_keys_and_indices_name_what_exists():
    expr = parse('info["csot"] + obs[4]', "spec.cost", names=("obs", "info"))
    with pytest.raises(EvalError, match=r"info has no key 'csot' \(keys present: cost, x\)"):
        expr.evaluate({"obs": np.zeros(4), "info": {"cost": 1.0, "x": 0.0}})
    with pytest.raises(EvalError, match=r"obs\[4\] is out of range \(obs has shape \(4,\)\)"):
        expr.evaluate({"obs": np.zeros(4), "info": {"csot": 1.0}})
    with pytest.raises(EvalError, match="division by zero"):
        parse("1 / t", "c", names=("t",)).evaluate({"t": 0})


def test_as_number_refuses_vectors_and_non_finite():
    assert as_number(True, "c") == 1.0 and as_number(np.float32(2.5), "c") == 2.5
    with pytest.raises(EvalError, match="must be one number"):
        as_number(np.zeros(3), "spec.cost")
    with pytest.raises(EvalError, match="not finite"):
        as_number(float("inf"), "spec.cost")


# ----------------------------------------------------------------------------- resources (issue 27)


def _frames_left_for(run, spare: int):
    """Run ``run()`` with the recursion limit ``spare`` frames above the current depth."""
    import inspect
    import sys

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack(0)) + spare)
    try:
        return run()
    finally:
        sys.setrecursionlimit(old)


@pytest.mark.parametrize(
    ("op", "n", "scope", "value"),
    [
        ("+", 4999, {"x": 1.0}, 4999.0),
        ("*", 4999, {"x": 1.0}, 1.0),
        ("-", 4999, {"x": 1.0}, -4997.0),
        (" and ", 1600, {"x": True}, True),
        (" or ", 1900, {"x": False}, False),
        (" < ", 2400, {"x": 1.0}, False),
    ],
)
def test_a_flat_chain_evaluates_in_a_bounded_number_of_frames(op, n, scope, value):
    """Evaluation depth does not grow with the chain: 5,000 terms evaluate within 60 frames
    (the recursive evaluator needed two frames per term and raised RecursionError)."""
    text = op.join(["x"] * n)
    assert len(text) <= 10_000
    expr = parse(text, "spec.cost", names=scope)
    assert _frames_left_for(lambda: expr.evaluate(scope), 60) == value


def test_an_index_chain_is_a_loop_with_a_short_message():
    nested = np.zeros((1,) * 32)
    text = "x" + "[0]" * 32 + "[0]" * 2000
    expr = parse(text, "spec.cost", names=("x",))
    with pytest.raises(EvalError) as err:
        _frames_left_for(lambda: expr.evaluate({"x": nested}), 60)
    assert "out of range" in str(err.value) and len(str(err.value)) < 200
    deep: dict = {"k": 0}
    for _ in range(1900):
        deep = {"k": deep}
    text = "m" + '["k"]' * 1900 + '.get("k", 7)'
    assert _frames_left_for(lambda: parse(text, "c", names=("m",)).evaluate({"m": deep}), 60) == 0


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("10**10**10", "overflow encountered in power"),
        ("sqrt(-1)", "invalid value encountered in sqrt"),
        ("log(0)", "divide by zero encountered in log"),
        ("exp(1000)", "overflow encountered in exp"),
        ("x * 1e308", "overflow encountered"),
    ],
)
def test_floating_point_errors_are_eval_errors_never_warnings(text, says):
    import warnings

    expr = parse(text, "spec.cost", names=("x",))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(EvalError, match=says):
            expr.evaluate({"x": np.float64(10.0)})
        # underflow to 0 is not an error
        assert parse("exp(-1000)", "c", names=()).evaluate({}) == 0.0


def test_messages_quote_long_expressions_shortly():
    text = "+".join(["x"] * 3000) + " +"
    with pytest.raises(ConfigError) as err:
        parse(text, "spec.cost", names=("x",))
    assert "ends early" in str(err.value) and len(str(err.value)) < 200
