"""Streaming reader of shield step logs (JSON Lines, docs/architecture.md "Shield logs and model").

One executed step per line, in the order the steps happened::

    {"episode": "e17", "t": 0, "state": {...} | "label", "action": "read", "next_state": {...}}

:func:`iter_steps` yields one :class:`Step` per line and holds only per-episode bookkeeping in
memory (last step index and state of each episode seen — O(#episodes), never O(file size)), so a
multi-GB log streams. Every problem is a one-line :class:`DataError` naming ``file:line`` and field:

* not UTF-8, longer than :data:`MAX_LINE_BYTES`, not JSON (numbers of more than 4,300 digits and
  nesting too deep included) / not an object / a missing key; unknown predicates, missing
  predicates, non-boolean values; unknown state labels or actions; ``t`` above :data:`MAX_T`;
* steps out of order within an episode (``t`` must rise by exactly 1) or a ``state`` that differs
  from the previous step's ``next_state`` of the same episode;
* a step after ``halt`` (halt ends the episode; its ``next_state`` may be omitted or null and is
  ignored);
* states that contradict the model: a ``next_state`` outside the declared K(s,a), or leaving an
  (absorbing) unsafe state.

Episodes may interleave (concurrent agents); "first n0 successors of a row" means first in file
order.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from safecert.errors import DataError
from safecert.shield.model import ShieldModel

_REQUIRED = ("episode", "t", "state", "action")
#: one step is a few hundred bytes; a longer line is refused before it is parsed
MAX_LINE_BYTES = 1 << 20
#: the step index of one episode
MAX_T = 1_000_000_000


class Step(NamedTuple):
    """One executed step: indices into the model; ``pos`` = position of next_state in K(s,a)."""

    episode: str
    t: int
    state: int
    action: int
    next_state: int
    pos: int
    line: int


def iter_steps(path: Path, model: ShieldModel) -> Iterator[Step]:
    """Yield the validated steps of a JSONL log file in file order (streaming)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path} does not exist", field="logs", fix="pass an existing JSONL file")
    # episode -> (last t, state the episode is in now; -1 after halt)
    open_eps: dict[str, tuple[int, int]] = {}
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise DataError(
            f"{path} cannot be read ({exc.strerror})", field="logs", fix="check its permissions"
        ) from None
    with fh:
        lineno = 0
        while True:
            data = fh.readline(MAX_LINE_BYTES + 1)
            if not data:
                return
            lineno += 1
            where = f"{path.name}:{lineno}"
            if len(data) > MAX_LINE_BYTES and not data.endswith(b"\n"):
                raise DataError(
                    f"line is longer than {MAX_LINE_BYTES} bytes",
                    field=where,
                    fix="one step per line",
                )
            try:
                raw = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(
                    f"not UTF-8 text (byte {exc.start} of the line)",
                    field=where,
                    fix="write the log as UTF-8",
                ) from None
            if not raw.strip():
                continue
            yield _parse(raw, where, lineno, model, open_eps)


def _parse(
    raw: str, where: str, lineno: int, model: ShieldModel, open_eps: dict[str, tuple[int, int]]
) -> Step:
    try:
        rec = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise DataError(
            f"not valid JSON ({exc.msg})", field=where, fix="one JSON object per line"
        ) from None
    except ValueError as exc:  # an integer of more than 4300 digits
        raise DataError(f"not usable JSON ({exc})", field=where) from None
    except RecursionError:
        raise DataError("nests arrays or objects too deeply", field=where) from None
    if not isinstance(rec, dict):
        raise DataError("a line must be a JSON object", field=where)
    for key in _REQUIRED:
        if key not in rec:
            raise DataError(f"missing key {key!r}", field=where, fix="see docs/shield.md")
    extra = set(rec) - {*_REQUIRED, "next_state"}
    if extra:
        raise DataError(f"unknown key {sorted(extra)[0]!r}", field=where, fix="remove it")
    ep = rec["episode"]
    if isinstance(ep, bool) or not isinstance(ep, str | int):
        raise DataError(
            f"episode must be a string or integer, got {ep!r}", field=f"{where}.episode"
        )
    ep = str(ep)
    t = rec["t"]
    if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t <= MAX_T:
        shown = repr(t) if len(repr(t)) <= 40 else repr(t)[:37] + "..."
        raise DataError(
            f"t must be a non-negative integer <= {MAX_T}, got {shown}", field=f"{where}.t"
        )
    s = model.state_index(rec["state"], field=f"{where}.state")
    a = model.action_index(rec["action"], field=f"{where}.action")
    if a == model.halt:
        s2, pos = model.sink, 0
    else:
        if rec.get("next_state") is None:
            raise DataError("missing next_state", field=where, fix="only halt may omit it")
        s2 = model.state_index(rec["next_state"], field=f"{where}.next_state")
        pos = model.successor_position(s, a, s2)
        if pos < 0:
            if model.unsafe[s]:
                raise DataError(
                    f"leaves the absorbing unsafe state {model.labels[s]}",
                    field=f"{where}.next_state",
                    fix="unsafe states are absorbing; end the episode or fix the unsafe expression",
                )
            raise DataError(
                f"{model.labels[s2]} is not a declared successor of "
                f"({model.labels[s]}, {model.actions[a]})",
                field=f"{where}.next_state",
                fix="enlarge [successors] in the model (always safe) or fix the log",
            )
    prev = open_eps.get(ep)
    if prev is not None:
        last_t, cur = prev
        if cur < 0:
            raise DataError(f"episode {ep!r} continues after halt", field=f"{where}.t")
        if t != last_t + 1:
            raise DataError(
                f"step t={t} of episode {ep!r} follows t={last_t}",
                field=f"{where}.t",
                fix="steps of an episode must be in order, t rising by 1",
            )
        if s != cur:
            raise DataError(
                f"state {model.labels[s]} differs from the previous next_state {model.labels[cur]}",
                field=f"{where}.state",
                fix="log the state the previous step led to",
            )
    open_eps[ep] = (t, -1 if a == model.halt else s2)
    return Step(ep, t, s, a, s2, pos, lineno)
