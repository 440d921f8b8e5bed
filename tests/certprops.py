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
FREE_KEYS = {"parameters", "params", "reasons", "options", "rule", "odd", "allowed", "values"}


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
