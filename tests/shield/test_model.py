"""The TOML model: state enumeration, successor sets, committed budgets."""

from __future__ import annotations

import numpy as np
import pytest

from safecert.errors import ConfigError, DataError
from safecert.shield.model import load_model, model_from_dict

SANDBOX = {
    "predicates": ["in_prod", "write", "confirmed", "harm"],
    "actions": ["read", "chmod", "write", "halt"],
    "halt": "halt",
    "initial": {"in_prod": False, "write": False, "confirmed": False, "harm": False},
    "unsafe": "harm",
    "goal": "in_prod and write and confirmed and not harm",
    "horizon": 10,
    "delta": 0.05,
    "budget": {"per_row": 50},
    "successors": {"read": ["confirmed"], "chmod": ["in_prod", "write"], "write": ["harm"]},
}

LABELS = {
    "states": ["a", "b", "bad"],
    "actions": ["go", "stay", "halt"],
    "initial": "a",
    "unsafe": ["bad"],
    "goal": "b",
    "horizon": 4,
    "delta": 0.1,
    "budget": {"fraction_of_even_share": 0.5, "episodes": 100},
    "successors": {"go": {"a": ["a", "b"], "b": ["b", "bad"]}, "stay": ["a", "b"]},
}


def test_predicate_mode_enumerates_states_and_successors():
    m = model_from_dict(SANDBOX)
    assert m.n_states == 16 and m.sink == 16 and m.actions[m.halt] == "halt"
    assert m.unsafe.sum() == 8 and m.live.sum() == 8
    s0 = m.initial
    assert m.state_repr(s0) == SANDBOX["initial"]
    # read may flip only "confirmed": two successors, both agree elsewhere
    k = m.successors(s0, m.actions.index("read"))
    assert sorted(m.labels[i] for i in k) == ["{confirmed}", "{}"]
    assert len(m.successors(s0, m.actions.index("chmod"))) == 4
    assert list(m.successors(s0, m.halt)) == [m.sink]
    bad = m.state_index({**SANDBOX["initial"], "harm": True})
    assert all(list(m.successors(bad, a)) == [bad] for a in range(4))  # absorbing
    # goal expression
    assert (
        m.goal.sum() == 1
        and m.labels[int(np.flatnonzero(m.goal)[0])] == "{in_prod,write,confirmed}"
    )


def test_budgets_are_fixed_from_the_model():
    m = model_from_dict(SANDBOX)
    assert set(np.unique(m.n0)) == {0, 50}
    assert (m.n0[~m.live] == 0).all() and (m.n0[:, m.halt] == 0).all()
    lab = model_from_dict(LABELS)
    # stochastic live rows: go@a, go@b, stay@a, stay@b -> R = 4; floor(0.5*100*4/4) = 50
    assert lab.stochastic_rows == 4 and lab.n0.max() == 50


def test_label_mode_successor_tables():
    m = model_from_dict(LABELS)
    a, b, bad = (m.state_index(x) for x in ("a", "b", "bad"))
    go = m.actions.index("go")
    assert list(m.successors(a, go)) == [a, b] and list(m.successors(b, go)) == [b, bad]
    assert m.successor_position(b, go, bad) == 1 and m.successor_position(a, go, bad) == -1
    assert m.is_unsafe(bad) and not m.is_unsafe(m.sink)


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"halt": "stop"}, "halt"),
        ({"unsafe": "harm or nope"}, "unsafe"),
        ({"unsafe": "harm and (write"}, "unsafe"),
        ({"successors": {"read": ["nope"]}}, "successors.read"),
        ({"successors": {"fly": ["harm"]}}, "successors"),
        ({"budget": {"per_row": 10, "fraction_of_even_share": 0.5}}, "budget"),
        ({"initial": {"in_prod": True}}, "initial"),
        ({"initial": {**SANDBOX["initial"], "harm": True}}, "initial"),
        ({"horizon": 0}, "horizon"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_bad_models_give_one_line_errors(patch, field):
    with pytest.raises(ConfigError) as err:
        model_from_dict({**SANDBOX, **patch})
    assert field in str(err.value) and "\n" not in str(err.value)


def test_state_index_errors_name_the_problem():
    m = model_from_dict(SANDBOX)
    with pytest.raises(DataError, match="unknown predicate 'colour'"):
        m.state_index({"in_prod": True, "write": False, "confirmed": False, "colour": True})
    with pytest.raises(DataError, match="not a boolean"):
        m.state_index({"in_prod": 1, "write": False, "confirmed": False, "harm": False})


def test_load_model_from_toml(tmp_path):
    p = tmp_path / "m.toml"
    p.write_text(
        'states = ["x", "y"]\nactions = ["go", "halt"]\ninitial = "x"\nunsafe = "y"\n'
        "horizon = 3\ndelta = 0.05\nbudget = { per_row = 5 }\n"
    )
    m = load_model(p)
    assert m.n_states == 2 and m.unsafe.tolist() == [False, True]
    with pytest.raises(ConfigError):
        load_model(tmp_path / "missing.toml")
