"""The declarative action map (``load_action_rules``): the payments rules file gives exactly the
answers of the example's Python action map, and malformed files are refused with the rule named."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from safecert.errors import ConfigError
from safecert.shield.action_rules import CannotDecide, load_action_rules
from tests.shield.payments_support import PAYMENTS, payments_phi

RULES = load_action_rules(PAYMENTS / "actions.toml")
PHI = payments_phi()


@given(
    tool=st.sampled_from(["pay", "lookup_invoice", "request_approval", "halt", "other"]),
    amount=st.one_of(st.integers(-10, 5000), st.floats(0, 5000, allow_nan=False)),
)
def test_rules_file_equals_the_python_action_map(tool, amount):
    arguments = {"invoice": "INV-001", "amount": amount}
    assert RULES(tool, arguments) == PHI.action(tool, arguments)


def test_conditions_and_first_match(tmp_path: Path):
    path = tmp_path / "r.toml"
    path.write_text(
        '[[rule]]\ntool = "send"\nwhen = { to = { in = ["a@x", "b@x"] }, n = { le = 2 } }\n'
        'action = "send_internal"\n[[rule]]\ntool = "send"\naction = "send_external"\n'
    )
    rules = load_action_rules(path)
    assert rules("send", {"to": "a@x", "n": 2}) == "send_internal"
    assert rules("send", {"to": "a@x", "n": 3}) == "send_external"
    assert rules("send", {"to": "a@x"}) == "send_external"  # absent argument: condition fails
    assert rules("read", {}) == "read"
    for not_a_number in ("1", True, None, [1]):  # present, not a number: no answer at all
        with pytest.raises(CannotDecide, match="argument 'n'"):
            rules("send", {"to": "a@x", "n": not_a_number})
    assert rules("send", {"to": "c@x", "n": "1"}) == "send_external"  # `in` failed first


@pytest.mark.parametrize(
    "condition, argument, expected",
    [
        ("{ eq = 0 }", 0, "free"),
        ("{ eq = 0 }", 0.0, "free"),
        ("{ eq = 0 }", 7, "paid"),
        ("{ eq = 0 }", "0", CannotDecide),  # a tool may read "0" as 0
        ("{ eq = 0 }", False, CannotDecide),  # Python alone would say False == 0
        ("{ eq = 0 }", None, CannotDecide),
        ("{ ne = 0 }", 7, "free"),
        ("{ ne = 0 }", "7", CannotDecide),  # Python alone would say "7" != 0: matched
        ("{ eq = true }", True, "free"),
        ("{ eq = true }", 1, CannotDecide),  # Python alone would say 1 == True
        ('{ eq = "EUR" }', "EUR", "free"),
        ('{ eq = "EUR" }', ["EUR"], CannotDecide),
        ("{ in = [0, 1] }", 1, "free"),
        ("{ in = [0, 1] }", 2, "paid"),
        ("{ in = [0, 1] }", "1", CannotDecide),
        ("{ in = [0, 1] }", True, CannotDecide),  # Python alone would say True in [0, 1]
        ('{ in = ["a", "b"] }', "b", "free"),
        ('{ in = ["a", "b"] }', {"b": 1}, CannotDecide),
    ],
)
def test_a_condition_compares_within_one_kind_or_blocks(
    tmp_path: Path, condition, argument, expected
):
    """``eq ne in`` as well as ``gt ge lt le``: an argument of another JSON kind than the rule's
    value is not "unequal" (which would pass the call on to the next rule, or match ``ne``): the
    rule cannot decide, and the call is blocked."""
    path = tmp_path / "r.toml"
    path.write_text(
        f'[[rule]]\ntool = "pay"\nwhen = {{ x = {condition} }}\naction = "free"\n'
        '[[rule]]\ntool = "pay"\naction = "paid"\n'
    )
    rules = load_action_rules(path)
    if expected is CannotDecide:
        with pytest.raises(CannotDecide, match="argument 'x'"):
            rules("pay", {"x": argument})
    else:
        assert rules("pay", {"x": argument}) == expected


def test_a_number_written_as_a_string_is_blocked_not_taken_for_a_small_one():
    """The upstream reads ``"5000"`` as 5000 (its schema says number): were the rules file's
    ``amount gt 1000`` false for the string, a large payment would pass as ``pay_small``."""
    from safecert.shield.abstraction import Abstraction, AbstractionFailed
    from safecert.shield.model import load_model

    abstraction = Abstraction(load_model(PAYMENTS / "model.toml"), PHI.phi, RULES)
    with pytest.raises(AbstractionFailed, match="not a number"):
        abstraction.action("pay", {"invoice": "INV-1", "amount": "5000"})
    assert PHI.action("pay", {"amount": "5000"}) == "pay_large"  # the Python map reads it too


@pytest.mark.parametrize(
    "text, needle",
    [
        ('[[rule]]\ntool = "pay"\n', "rule 1"),
        ('[[rule]]\ntool = "pay"\naction = "x"\nwhen = { amount = { about = 3 } }\n', "rule 1"),
        ('[[rule]]\ntool = "pay"\naction = "x"\nextra = 1\n', "rule 1"),
        ("rule = 3\n", "[[rule]]"),
        ("not toml [", "cannot read"),
        ('[[rule]]\ntool = "p"\naction = "x"\nwhen = { a = { gt = "5" } }\n', "gt needs a number"),
        ('[[rule]]\ntool = "p"\naction = "x"\nwhen = { a = { le = true } }\n', "le needs a number"),
        ('[[rule]]\ntool = "p"\naction = "x"\nwhen = { a = { lt = nan } }\n', "not NaN"),
        ('[[rule]]\ntool = "p"\naction = "x"\nwhen = { a = { eq = [1] } }\n', "eq needs"),
        ('[[rule]]\ntool = "p"\naction = "x"\nwhen = { a = { in = [] } }\n', "non-empty list"),
        ('[[rule]]\ntool = "p"\naction = "x"\nwhen = { a = { in = [1, "1"] } }\n', "in needs"),
        ('[[rule]]\ntool = "p"\naction = "x"\nwhen = { a = { in = "ab" } }\n', "in needs"),
    ],
)
def test_malformed_rules_are_refused(tmp_path: Path, text, needle):
    path = tmp_path / "r.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=None) as info:
        load_action_rules(path)
    assert needle in str(info.value)


def test_rules_are_answered_in_the_calling_thread_and_fail_closed():
    """A rules file is our own bounded code: the abstraction evaluates it where it is called (no
    deadline worker is taken from the pool or added to it), with the file's answers, and a rule
    that cannot decide (a string where it compares numbers) blocks the call instead of raising."""
    import anyio

    from safecert.shield import deadline
    from safecert.shield.abstraction import Abstraction, AbstractionFailed
    from safecert.shield.model import load_model

    model = load_model(PAYMENTS / "model.toml")
    abstraction = Abstraction(model, PHI.phi, RULES)

    def idle() -> dict:  # the idle workers of every CPU's pool
        return {cpu: list(pool) for cpu, pool in deadline._idle.items()}

    idle_before = idle()
    assert abstraction.action("pay", {"amount": 5000}) == "pay_large"
    assert anyio.run(abstraction.aaction, "pay", {"amount": 5}) == "pay_small"
    assert idle() == idle_before  # no worker taken, none added
    with pytest.raises(AbstractionFailed, match="action map failed .CannotDecide"):
        abstraction.action("pay", {"amount": "5"})
    with pytest.raises(AbstractionFailed, match="action map failed .CannotDecide"):
        anyio.run(abstraction.aaction, "pay", {"amount": "5"})
