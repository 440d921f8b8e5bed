"""Streaming reader of shield step logs (JSON Lines, docs/architecture.md "Shield logs and model").

One executed step per line, in the order the steps happened::

    {"episode": "e17", "t": 0, "state": {...} | "label", "action": "read", "next_state": {...}}

:func:`iter_steps` returns a :class:`StepLog`: iterate it for one :class:`Step` per line, or call
:meth:`StepLog.blocks` for the same steps as NumPy columns (what :func:`~safecert.shield.estimate.
estimate` counts). Memory holds one block of the file (:data:`BLOCK_BYTES`) and per-episode
bookkeeping (last step index and state of each episode seen — O(#episodes), never O(file size)),
so a multi-GB log streams. Every problem is a one-line :class:`DataError` naming ``file:line`` and
field:

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

Two readers, one meaning. :func:`reference_steps` is the specification: line by line, the
standard library's ``json``, every check in the order listed above. The fast reader (what
:func:`iter_steps` uses) parses a block of lines with ``orjson`` and checks it column-wise; it
accepts a block only when every line is plainly valid (exact types, known names, declared
successors, consistent episodes) and otherwise replays the block through the reference from the
same episode state — so it yields the same steps, and raises the same error at the same line, as
the reference on every input (tests/shield/test_logs_fast.py checks this on fuzzed logs). The one
place where the two JSON parsers could differ on an accepted line — the ignored ``next_state`` of a
halt step, where ``json`` refuses 4,300-digit integers and deep nesting that ``orjson`` would read —
is accepted by the fast reader only when it holds strings, booleans or null.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from itertools import chain
from operator import itemgetter
from pathlib import Path
from typing import BinaryIO, NamedTuple, Protocol

import numpy as np
import orjson

from safecert.errors import DataError
from safecert.shield.model import ShieldModel

_REQUIRED = ("episode", "t", "state", "action")
#: one step is a few hundred bytes; a longer line is refused before it is parsed
MAX_LINE_BYTES = 1 << 20
#: the step index of one episode
MAX_T = 1_000_000_000
#: bytes the fast reader parses and checks at a time
BLOCK_BYTES = 1 << 22

_ABSENT = object()
_GETTERS = [itemgetter(key) for key in _REQUIRED]
_GET_NEXT = itemgetter("next_state")
#: values a halt step's (ignored) next_state may hold on the fast path (see the module docstring)
_PLAIN = {str, bool, type(None)}


class Step(NamedTuple):
    """One executed step: indices into the model; ``pos`` = position of next_state in K(s,a)."""

    episode: str
    t: int
    state: int
    action: int
    next_state: int
    pos: int
    line: int


@dataclass(frozen=True)
class StepBlock:
    """Consecutive validated steps as columns, in file order (``episode`` holds the names)."""

    episode: list[str]
    t: np.ndarray
    state: np.ndarray
    action: np.ndarray
    next_state: np.ndarray
    pos: np.ndarray
    line: np.ndarray

    def __len__(self) -> int:
        return len(self.episode)

    def steps(self) -> Iterator[Step]:
        cols = (self.t, self.state, self.action, self.next_state, self.pos, self.line)
        for ep, *rest in zip(self.episode, *(c.tolist() for c in cols), strict=True):
            yield Step(ep, *rest)

    @staticmethod
    def of(steps: list[Step]) -> StepBlock:
        cols = [np.array([st[i] for st in steps], dtype=np.int64) for i in range(1, 7)]
        return StepBlock([st.episode for st in steps], *cols)


class _Open(Protocol):
    def get(self, ep: str) -> tuple[int, int] | None: ...
    def __setitem__(self, ep: str, value: tuple[int, int]) -> None: ...


class _Episodes:
    """Per-episode bookkeeping: the last ``t`` and the state the episode is in now (−1 after halt),
    in arrays indexed by an id per episode name; ``get``/``[]=`` as on a dict (the reference's
    interface)."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.last_t = np.full(1024, -1, dtype=np.int64)  # -1: no step seen yet
        self.cur = np.zeros(1024, dtype=np.int64)

    def __len__(self) -> int:
        return sum(1 for i in self.index.values() if self.last_t[i] >= 0)

    def ids(self, names: list[str]) -> np.ndarray:
        index = self.index
        for name in dict.fromkeys(names):
            if name not in index:
                index[name] = len(index)
        if len(index) > len(self.last_t):
            grow = max(len(index), 2 * len(self.last_t)) - len(self.last_t)
            self.last_t = np.r_[self.last_t, np.full(grow, -1, dtype=np.int64)]
            self.cur = np.r_[self.cur, np.zeros(grow, dtype=np.int64)]
        return np.fromiter(map(index.__getitem__, names), dtype=np.int64, count=len(names))

    def get(self, ep: str) -> tuple[int, int] | None:
        i = self.index.get(ep)
        if i is None or self.last_t[i] < 0:
            return None
        return int(self.last_t[i]), int(self.cur[i])

    def __setitem__(self, ep: str, value: tuple[int, int]) -> None:
        i = self.ids([ep])[0]
        self.last_t[i], self.cur[i] = value


def iter_steps(path: Path, model: ShieldModel) -> StepLog:
    """The validated steps of a JSONL log file in file order (streaming; see :class:`StepLog`)."""
    return StepLog(Path(path), model)


def reference_steps(path: Path, model: ShieldModel) -> Iterator[Step]:
    """The specification reader: line by line with ``json`` (module docstring)."""
    path = Path(path)
    open_eps: dict[str, tuple[int, int]] = {}
    with _open(path) as fh:
        lineno = 0
        while True:
            data = fh.readline(MAX_LINE_BYTES + 1)
            if not data:
                return
            lineno += 1
            content = data[:-1] if data.endswith(b"\n") else data
            step = _line(content, path.name, lineno, model, open_eps)
            if step is not None:
                yield step


class StepLog:
    """The steps of one log file, read lazily when iterated (fast reader, module docstring).

    Iterating yields :class:`Step` objects; :meth:`blocks` yields :class:`StepBlock` columns.
    :attr:`episodes` is the number of distinct episodes read so far; every pass reads the
    file afresh."""

    def __init__(self, path: Path, model: ShieldModel) -> None:
        self.path, self.model = Path(path), model
        self._eps = _Episodes()

    @property
    def episodes(self) -> int:
        return len(self._eps)

    def __iter__(self) -> Iterator[Step]:
        for block in self._read():
            yield from block.steps() if isinstance(block, StepBlock) else block

    def blocks(self) -> Iterator[StepBlock]:
        for block in self._read():
            yield block if isinstance(block, StepBlock) else StepBlock.of(list(block))

    def _read(self) -> Iterator[StepBlock | Iterator[Step]]:
        self._eps = _Episodes()  # every pass reads the file afresh
        with _open(self.path) as fh:
            done, carry = 0, b""  # lines before the current block; the unfinished last line
            while True:
                chunk = fh.read(BLOCK_BYTES)
                data = carry + chunk if carry else chunk
                if chunk:
                    lines = data.split(b"\n")
                    carry = lines.pop()
                else:  # end of file: a last line without newline
                    lines = [data] if data else []
                if lines:
                    block = self._fast(lines, done + 1)
                    yield block if block is not None else self._replay(lines, done + 1)
                    done += len(lines)
                if not chunk:
                    return
                if len(carry) > MAX_LINE_BYTES:
                    yield self._replay([carry], done + 1)

    def _replay(self, lines: list[bytes], first: int) -> Iterator[Step]:
        for i, content in enumerate(lines):
            step = _line(content, self.path.name, first + i, self.model, self._eps)
            if step is not None:
                yield step

    # -- the fast path: None whenever the reference might say something else ------------------
    @cached_property
    def _tables(self) -> tuple[dict[str, int], dict[str, int] | None, np.ndarray, np.ndarray]:
        """Action and label indices; sorted keys row·(n+1) + s′ of every declared (s, a, s′)
        and the position of s′ in K(s,a) for each."""
        model = self.model
        actions = {a: i for i, a in enumerate(model.actions)}
        labels = (
            None if model.predicates is not None else {s: i for i, s in enumerate(model.labels)}
        )
        n1 = model.n_states + 1
        rows, j = np.nonzero(model.succ.reshape(-1, model.succ.shape[-1]) >= 0)
        keys = rows * n1 + model.succ.reshape(-1, model.succ.shape[-1])[rows, j]
        order = np.argsort(keys, kind="stable")
        return actions, labels, keys[order], j[order]

    def _states(self, values: list) -> np.ndarray | None:
        """State indices of plainly valid log states (labels or predicate objects), else None."""
        labels = self._tables[1]
        try:
            if labels is not None:
                idx = list(map(labels.get, values))
                return None if None in idx else np.array(idx, dtype=np.int64)
            preds = self.model.predicates
            assert preds is not None
            vals = list(map(itemgetter(*preds), values))
        except (KeyError, TypeError):  # a missing predicate, not an object, an unhashable label
            return None
        if sum(map(len, values)) != len(preds) * len(values):  # an unknown predicate
            return None
        flat = vals if len(preds) == 1 else list(chain.from_iterable(vals))
        if set(map(type, flat)) != {bool}:
            return None
        bits = np.array(flat, dtype=np.int64).reshape(-1, len(preds))
        return bits @ (1 << np.arange(len(preds), dtype=np.int64))

    def _fast(self, lines: list[bytes], first: int) -> StepBlock | None:
        model = self.model
        if max(map(len, lines)) > MAX_LINE_BYTES:
            return None
        numbers = np.arange(first, first + len(lines), dtype=np.int64)
        try:
            recs = list(map(orjson.loads, lines))
        except orjson.JSONDecodeError:
            keep = [i for i, x in enumerate(lines) if x.strip()]  # blank lines are skipped
            try:
                recs = [orjson.loads(lines[i]) for i in keep]
            except orjson.JSONDecodeError:
                return None
            numbers = numbers[keep]
        if not recs:
            return StepBlock([], *(np.zeros(0, np.int64) for _ in range(6)))
        try:
            eps, ts, states, acts = (list(map(get, recs)) for get in _GETTERS)
        except (KeyError, TypeError):  # a missing key, not an object
            return None
        try:
            nxt = list(map(_GET_NEXT, recs))
        except KeyError:  # some step omits next_state (halt may)
            nxt = [r.get("next_state", _ABSENT) for r in recs]
        if sum(map(len, recs)) != 5 * len(recs) - nxt.count(_ABSENT):  # an unknown key
            return None
        if not set(map(type, eps)) <= {str, int} or set(map(type, ts)) != {int}:
            return None
        if min(ts) < 0 or max(ts) > MAX_T:
            return None
        actions, _, keys, keypos = self._tables
        try:
            a_list = list(map(actions.get, acts))
        except TypeError:
            return None
        if None in a_list:
            return None
        s = self._states(list(states))
        if s is None:
            return None
        a = np.array(a_list, dtype=np.int64)
        halt = a == model.halt
        s2 = np.full(len(recs), model.sink, dtype=np.int64)
        pos = np.zeros(len(recs), dtype=np.int64)
        moving = np.flatnonzero(~halt)
        if len(moving) < len(recs):
            for i in np.flatnonzero(halt).tolist():
                v = nxt[i]
                if not (v is _ABSENT or type(v) in _PLAIN or _plain_object(v)):
                    return None
            nxt = [nxt[i] for i in moving.tolist()]
        if len(moving):
            if _ABSENT in nxt or None in nxt:
                return None
            s2_moving = self._states(nxt)
            if s2_moving is None:
                return None
            query = (s[moving] * len(model.actions) + a[moving]) * (model.n_states + 1) + s2_moving
            at = np.minimum(np.searchsorted(keys, query), len(keys) - 1)
            if not (keys[at] == query).all():  # not a declared successor
                return None
            s2[moving], pos[moving] = s2_moving, keypos[at]
        t = np.array(ts, dtype=np.int64)
        names = list(eps) if int not in set(map(type, eps)) else [str(e) for e in eps]
        if not self._consistent(names, t, s, np.where(halt, -1, s2)):
            return None
        return StepBlock(names, t, s, a, s2, pos, numbers)

    def _consistent(
        self, names: list[str], t: np.ndarray, s: np.ndarray, after: np.ndarray
    ) -> bool:
        """Every step continues its episode (t + 1, same state, not after halt); if so, record
        each episode's last step."""
        eps = self._eps
        ids = eps.ids(names)
        order = np.argsort(ids, kind="stable")
        e, ts, ss, af = ids[order], t[order], s[order], after[order]
        first = np.r_[True, e[1:] != e[:-1]]
        prev_t = np.where(first, eps.last_t[e], np.r_[0, ts[:-1]])
        prev_cur = np.where(first, eps.cur[e], np.r_[0, af[:-1]])
        checked = ~first | (eps.last_t[e] >= 0)
        if (checked & ((prev_cur < 0) | (ts != prev_t + 1) | (ss != prev_cur))).any():
            return False
        last = np.r_[e[1:] != e[:-1], True]
        eps.last_t[e[last]], eps.cur[e[last]] = ts[last], af[last]
        return True


def _plain_object(v: object) -> bool:
    return type(v) is dict and set(map(type, v.values())) <= _PLAIN


def _open(path: Path) -> BinaryIO:
    if not path.is_file():
        raise DataError(f"{path} does not exist", field="logs", fix="pass an existing JSONL file")
    try:
        return path.open("rb")
    except OSError as exc:
        raise DataError(
            f"{path} cannot be read ({exc.strerror})", field="logs", fix="check its permissions"
        ) from None


def _line(
    content: bytes, name: str, lineno: int, model: ShieldModel, open_eps: _Open
) -> Step | None:
    """One line (without its newline) checked as the reference does; None for a blank line."""
    where = f"{name}:{lineno}"
    if len(content) > MAX_LINE_BYTES:
        raise DataError(
            f"line is longer than {MAX_LINE_BYTES} bytes", field=where, fix="one step per line"
        )
    try:
        raw = content.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(
            f"not UTF-8 text (byte {exc.start} of the line)",
            field=where,
            fix="write the log as UTF-8",
        ) from None
    if not raw.strip():
        return None
    return _parse(raw, where, lineno, model, open_eps)


def _parse(raw: str, where: str, lineno: int, model: ShieldModel, open_eps: _Open) -> Step:
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
