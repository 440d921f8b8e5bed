"""``Decision``: its written-out constructor keeps every behaviour of the frozen dataclass it
replaces, checked against a reference dataclass with the same fields and the generated
``__init__``."""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from safecert.shield.audit import Decision


@dataclass(frozen=True)
class Reference:
    allowed: bool
    tool: str
    action: str | None
    state: str | None
    permitted: tuple[str, ...]
    reason: str = ""
    ends_session: bool = False
    arguments: dict[str, Any] = field(default_factory=dict, compare=False)


NAME = st.text(max_size=4)
FIELDS = st.tuples(
    st.booleans(), NAME, st.none() | NAME, st.none() | NAME, st.lists(NAME, max_size=3).map(tuple),
    NAME, st.booleans(), st.dictionaries(NAME, st.integers(), max_size=2),
)  # fmt: skip


@given(FIELDS, FIELDS)
def test_same_behaviour_as_the_generated_frozen_dataclass(a, b):
    da, db, ra, rb = Decision(*a), Decision(*b), Reference(*a), Reference(*b)
    assert repr(da) == repr(ra).replace("Reference", "Decision", 1)
    assert (da == db) is (ra == rb) and (da == Decision(*a))
    assert hash(da) == hash(Decision(*a[:7], {"other": 1}))  # arguments are not compared
    assert (hash(da) == hash(db)) is (hash(ra) == hash(rb))
    assert dataclasses.asdict(da) == dataclasses.asdict(ra)
    changed = dataclasses.replace(da, reason="r", ends_session=True)
    assert dataclasses.asdict(changed) == dataclasses.asdict(
        dataclasses.replace(ra, reason="r", ends_session=True)
    )
    assert pickle.loads(pickle.dumps(da)) == da


def test_frozen_and_defaults_as_declared():
    d = Decision(True, "t", "a", "s", ("a",))
    assert (d.reason, d.ends_session, d.arguments) == ("", False, {})
    assert d.arguments is not Decision(True, "t", "a", "s", ("a",)).arguments  # a fresh dict each
    assert Decision(True, "t", "a", "s", (), arguments={"x": 1}).arguments == {"x": 1}
    for name in ("allowed", "arguments", "__dict__"):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(d, name, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        del d.tool
    assert [f.name for f in dataclasses.fields(Decision)] == [
        f.name for f in dataclasses.fields(Reference)
    ]
