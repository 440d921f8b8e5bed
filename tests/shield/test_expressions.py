"""The labels dialect of the shared expression language (the shield's unsafe/goal sets): Python's
semantics on well-formed input, ConfigError otherwise."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safecert.errors import ConfigError
from safecert.expressions import MAX_DEPTH
from safecert.expressions import eval_labels as eval_expression

NAMES = ["p", "q", "r", "s_1", "in.prod"]
PY = {"p": "p", "q": "q", "r": "r", "s_1": "s_1", "in.prod": "in_prod"}
AND, OR, NOT = ["and", "&", "&&"], ["or", "|", "||"], ["not", "!", "~"]


@st.composite
def _exprs(draw, depth=0):
    """(our text, Python text); parentheses only sometimes, so precedence is exercised."""
    kind = draw(st.sampled_from(["name", "const", "not", "and", "or"] if depth < 4 else ["name"]))
    if kind == "name":
        n = draw(st.sampled_from(NAMES))
        return n, PY[n]
    if kind == "const":
        c = draw(st.sampled_from(["true", "false"]))
        return c, c.capitalize()
    if kind == "not":
        ours, py = draw(_exprs(depth + 1))
        return f"{draw(st.sampled_from(NOT))} {ours}", f"not {py}"
    (lo, lp), (ro, rp) = draw(_exprs(depth + 1)), draw(_exprs(depth + 1))
    op = draw(st.sampled_from(AND if kind == "and" else OR))
    ours, py = f"{lo} {op} {ro}", f"{lp} {kind} {rp}"
    if draw(st.booleans()):
        ours, py = f"({ours})", f"({py})"
    return ours, py


@settings(max_examples=300, deadline=None)
@given(_exprs(), st.integers(1, 40), st.integers(0, 2**32 - 1))
def test_agrees_with_python_on_random_assignments(expr, n, seed):
    ours, py = expr
    rng = np.random.default_rng(seed)
    names = {k: rng.random(n) < 0.5 for k in NAMES}
    got = eval_expression(ours, names, "unsafe")
    want = [
        bool(eval(py, {}, {PY[k]: bool(v[i]) for k, v in names.items()}))  # noqa: S307
        for i in range(n)
    ]
    assert got.dtype == bool and got.shape == (n,) and got.tolist() == want


_ALPHABET = st.sampled_from(list("pqr ()&|!~-.:_") + ["and", "or", "not", "true", " ", "x"])


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=60), st.lists(_ALPHABET, max_size=30).map("".join)))
def test_random_strings_raise_only_config_error(text):
    names = {"p": np.array([True, False]), "q": np.array([False, False]), "r": np.ones(2, bool)}
    try:
        out = eval_expression(text, names, "goal")
    except ConfigError as e:
        assert "goal" in str(e) and "\n" not in str(e)
    else:
        assert out.dtype == bool and out.shape == (2,)


@pytest.mark.parametrize(
    "text, match",
    [
        ("", "empty"),
        ("p and", "ends early"),
        ("(p", "missing|ends early"),
        ("p q", "unexpected"),
        ("nope", "unknown name"),
        ("p $ q", "cannot parse"),
        ("(" * (MAX_DEPTH + 1) + "p" + ")" * (MAX_DEPTH + 1), "nested"),
        ("not " * (MAX_DEPTH + 1) + "p", "nested"),
        ("not " * MAX_DEPTH + "p", None),
        ("p or " * 5000 + "p", "longer"),
    ],
)
def test_errors_name_the_field(text, match):
    if match is None:  # at the depth limit: still parsed
        assert eval_expression(text, {"p": np.ones(3, bool)}, "unsafe").shape == (3,)
        return
    with pytest.raises(ConfigError, match=match) as err:
        eval_expression(text, {"p": np.ones(3, bool), "q": np.zeros(3, bool)}, "unsafe")
    assert "unsafe" in str(err.value)


def test_precedence_and_copies():
    p = np.array([True, True, False, False])
    q = np.array([True, False, True, False])
    names = {"p": p, "q": q}
    assert eval_expression("not p or q and p", names, "f").tolist() == (~p | (q & p)).tolist()
    out = eval_expression("p", names, "f")
    out[:] = False
    assert p.tolist() == [True, True, False, False]  # the caller's arrays are not aliased
