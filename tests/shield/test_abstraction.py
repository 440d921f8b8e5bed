"""``json_copy``: what a guard session keeps of a call's arguments and result is an independent
deep copy — equal to the original, sharing no mutable container with it — for any JSON-like value,
and falls back to ``copy.deepcopy`` for anything else."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from safecert.shield.abstraction import json_copy

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=5), inner, max_size=4)
        | st.tuples(inner, inner)
    ),
    max_leaves=20,
)


def _containers(value: object) -> list[int]:
    if isinstance(value, dict):
        return [id(value), *(i for v in value.values() for i in _containers(v))]
    if isinstance(value, list):
        return [id(value), *(i for v in value for i in _containers(v))]
    if isinstance(value, tuple):
        return [i for v in value for i in _containers(v)]
    return []


@given(JSON)
def test_an_equal_copy_sharing_no_mutable_container(value):
    copied = json_copy(value)
    assert copied == value and type(copied) is type(value)
    assert not set(_containers(copied)) & set(_containers(value))


def test_other_objects_are_deep_copied():
    class Box:
        def __init__(self) -> None:
            self.items = [1, 2]

    box = {"b": Box()}
    copied = json_copy(box)
    assert copied["b"] is not box["b"] and copied["b"].items == [1, 2]
    assert copied["b"].items is not box["b"].items
