"""Property checks shared by every kind's certificate tests: typed round trips and mutations.

``round_trip_bytes``: a valid certificate read back and written again gives identical bytes.
``mutations``: every way of deleting a model field or changing a value's JSON type; each must be
a one-line :class:`DataError` (``safecert verify`` exit 2), never another exception.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

#: dict-valued fields whose keys are data, not model fields (deleting a key keeps them valid)
FREE_KEYS = {
    "parameters",
    "params",
    "reasons",
    "kinds",
    "options",
    "rule",
    "odd",
    "allowed",
    "values",
}


def leaves(data: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """(path, value) of every node below the envelope, skipping free-form dicts."""
    if isinstance(data, dict):
        for k, v in data.items():
            if k in FREE_KEYS:
                continue
            yield (*path, k), v
            yield from leaves(v, (*path, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield (*path, i), v
            yield from leaves(v, (*path, i))


def retype(value: Any) -> Any:
    """A value of another JSON type that no strict field accepts in place of ``value``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return 7
    if isinstance(value, list):
        return {"x": value}
    if isinstance(value, dict):
        return [value]
    return {"null": None}  # None -> an object


def set_at(data: Any, path: tuple, value: Any) -> Any:
    out = copy.deepcopy(data)
    cur = out
    for p in path[:-1]:
        cur = cur[p]
    cur[path[-1]] = value
    return out


def delete_at(data: Any, path: tuple) -> Any:
    out = copy.deepcopy(data)
    cur = out
    for p in path[:-1]:
        cur = cur[p]
    del cur[path[-1]]
    return out


def field_paths(data: dict) -> list[tuple]:
    """Paths of every model field (dict keys outside free-form dicts)."""
    return [p for p, _ in leaves(data) if isinstance(p[-1], str)]


def load(text: str) -> dict:
    return json.loads(text)


def perturb_numbers(data: dict, seed: int, count: int = 10) -> dict:
    """``data`` with up to ``count`` numeric model fields set to other numbers of their type
    (still a valid certificate: parsing checks types, not meaning)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    numbers = [
        (p, v) for p, v in leaves(data) if isinstance(v, int | float) and not isinstance(v, bool)
    ]
    for i in rng.choice(len(numbers), size=min(count, len(numbers)), replace=False):
        path, value = numbers[int(i)]
        new = int(rng.integers(0, 10**6)) if isinstance(value, int) else float(rng.normal(0, 1e3))
        data = set_at(data, path, new)
    return data


def assert_round_trips(data: dict) -> None:
    """A valid certificate, parsed and written again, gives its canonical bytes back."""
    from safecert.certificate import canonical_json, certificate_bytes, parse_certificate

    text = canonical_json(data)
    cert = parse_certificate(json.loads(text), source="test")
    assert certificate_bytes(cert).decode() == text


def assert_every_mutation_is_one_line(data: dict, minimum_fields: int = 20) -> None:
    """Deleting any model field, or giving any value another JSON type, is one DataError line."""
    import pytest

    from safecert.certificate import parse_certificate
    from safecert.errors import DataError

    paths = field_paths(data)
    assert len(paths) >= minimum_fields
    for path in paths:
        with pytest.raises(DataError) as deleted:
            parse_certificate(delete_at(data, path), source="test")
        assert "\n" not in str(deleted.value), path
    for path, value in leaves(data):
        with pytest.raises(DataError) as retyped:
            parse_certificate(set_at(data, path, retype(value)), source="test")
        assert str(retyped.value).startswith("certificate"), path
