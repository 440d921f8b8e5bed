"""The optional grid layout of a shield model (``[layout]``): how the PNG map draws label-mode
states as cells, each labelled ``cell_format.format(row=r, col=c)``.

Guarantee: a layout that validates draws at most :data:`MAX_LAYOUT_SIDE` x
:data:`MAX_LAYOUT_SIDE` cells, and its ``cell_format`` fills every cell without error into a label
of bounded length (:func:`check_cell_format`: only ``{row}``/``{col}``, widths below 100).
"""

from __future__ import annotations

import re
import string

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: the PNG map draws one square per cell; larger grids are left without a map
MAX_LAYOUT_SIDE = 200
#: ``{row}``/``{col}`` with an optional zero-padded width below 100 and an optional ``d``
_CELL_SPEC = re.compile(r"0?[0-9]{0,2}d?")
MAX_CELL_FORMAT = 200


class LayoutSpec(BaseModel):
    """Optional grid layout for the PNG map: label ``cell_format.format(row=r, col=c)``; at most
    :data:`MAX_LAYOUT_SIDE` rows and columns (one drawn square per cell)."""

    model_config = ConfigDict(extra="forbid")
    rows: int = Field(ge=1, le=MAX_LAYOUT_SIDE, strict=True)
    cols: int = Field(ge=1, le=MAX_LAYOUT_SIDE, strict=True)
    cell_format: str = "r{row}c{col}"
    moves: dict[str, tuple[int, int]] = Field(default_factory=dict)

    @field_validator("cell_format")
    @classmethod
    def _format(cls, value: str) -> str:
        check_cell_format(value)
        return value


def check_cell_format(value: str) -> None:
    """Refuse a ``cell_format`` that is more than literal text and ``{row}``/``{col}`` fields
    (widths below 100, e.g. ``{row:02d}``): no attribute or index access, no positional
    fields, no nested specs, so filling it can neither fail nor build a huge string."""
    fix = 'use only the placeholders {row} and {col}, e.g. "r{row}c{col}" or "r{row:02d}c{col}"'
    if len(value) > MAX_CELL_FORMAT:
        raise ValueError(f"is {len(value)} characters, more than {MAX_CELL_FORMAT}; {fix}")
    try:
        fields = list(string.Formatter().parse(value))
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a format string ({exc}); {fix}") from None
    for _, name, spec, conversion in fields:
        if name is None:
            continue
        if name not in ("row", "col") or conversion or not _CELL_SPEC.fullmatch(spec or ""):
            shown = "{" + name + (f"!{conversion}" if conversion else "")
            shown += (f":{spec}" if spec else "") + "}"
            raise ValueError(f"{value!r} has the field {shown!r}; {fix}")
