"""Canonical JSON: equal content, equal bytes — what certificates, signatures and ``--json``
output are written as.

Imports neither pydantic nor NumPy: a model or an array can only reach :func:`to_jsonable` once
its library is loaded, so the library is looked up in ``sys.modules`` instead of imported, and a
command that prints plain numbers (``safecert bound --json``) pays for neither.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from safecert.errors import DataError


def to_jsonable(obj: Any) -> Any:
    """Convert NumPy scalars/arrays, tuples, paths and models to plain JSON types; reject NaN/inf."""
    pydantic = sys.modules.get("pydantic")
    if pydantic is not None and isinstance(obj, pydantic.BaseModel):
        return to_jsonable(obj.model_dump(mode="python"))
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    np = sys.modules.get("numpy")
    if np is not None:
        if isinstance(obj, np.ndarray):
            return to_jsonable(obj.tolist())
        if isinstance(obj, np.bool_):
            return bool(obj)
        if isinstance(obj, np.integer):
            return int(obj)
        if isinstance(obj, np.floating):
            obj = float(obj)
    if isinstance(obj, bool):
        return obj
    if isinstance(obj, float):
        value = float(obj)
        if not math.isfinite(value):
            raise DataError(f"non-finite number {value}", field="certificate")
        return value
    if isinstance(obj, Path):
        return str(obj)
    return obj


def canonical_json(data: Any) -> str:
    """Sorted keys, two-space indent, no NaN: equal content, equal bytes."""
    return (
        json.dumps(to_jsonable(data), sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False)
        + "\n"
    )
