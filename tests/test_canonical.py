"""Canonical JSON (:mod:`safecert.canonical`): NumPy and pydantic values become plain JSON with
the values json itself would print for the plain equivalents; non-finite numbers are refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from pydantic import BaseModel

from safecert.canonical import canonical_json, to_jsonable
from safecert.errors import DataError


class _Point(BaseModel):
    x: float
    tags: tuple[str, ...]


def test_numpy_and_pydantic_values_become_their_plain_equivalents():
    data = {
        1: np.float32(0.1),
        "a": np.arange(3, dtype=np.int64),
        "b": (np.bool_(True), np.int8(-3), Path("/x/y")),
        "m": _Point(x=np.float64(2.5), tags=("t",)),
    }
    plain = {
        "1": float(np.float32(0.1)),
        "a": [0, 1, 2],
        "b": [True, -3, "/x/y"],
        "m": {"x": 2.5, "tags": ["t"]},
    }
    assert to_jsonable(data) == plain
    assert canonical_json(data) == json.dumps(plain, sort_keys=True, indent=2) + "\n"
    assert [type(v) for v in to_jsonable([np.float64(1), np.int32(1), np.bool_(0)])] == [
        float,
        int,
        bool,
    ]


@pytest.mark.parametrize("bad", [float("nan"), np.inf, np.float32("-inf"), [1.0, np.nan]])
def test_non_finite_numbers_are_refused(bad):
    with pytest.raises(DataError, match="non-finite"):
        canonical_json({"v": bad})
