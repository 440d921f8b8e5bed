"""``episodes.sqlite``: every finished episode, written as it finishes.

SQLite in WAL mode, one transaction per batch of records. ``(cell, index)`` is the primary key and
inserts are ``INSERT OR IGNORE``, so a resumed run can never count an episode twice; a record is
either committed (and kept) or lost with the batch that was in flight (and rerun on resume —
its seed is fixed, so the rerun gives the same outcome). ``synchronous=FULL``: a committed batch
survives a power loss, not only a crash. A ``meta`` table holds JSON values (the config digest,
estimated observation ranges, …).

A store is evidence a certificate's holder hands over, so every row is checked as it is read
(:meth:`EpisodeStore.records`, :meth:`EpisodeStore.rows_sha256`): SQLite keeps whatever type a
value was written with, and a store built by hand need not have our schema's constraints. A value
of the wrong type (text in ``ret``, a float ``idx``, NULL, a boolean other than 0/1) or a
``(cell, idx)`` held twice is a :class:`~safecert.errors.DataError` naming the table, the row and
the column — one line, never a traceback further down.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from safecert.blackbox.jobs import EpisodeRecord
from safecert.errors import DataError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS episodes (
    cell INTEGER NOT NULL, idx INTEGER NOT NULL, seed INTEGER NOT NULL,
    ret REAL NOT NULL, cost REAL NOT NULL, goal INTEGER NOT NULL,
    terminated INTEGER NOT NULL, truncated INTEGER NOT NULL, steps INTEGER NOT NULL,
    failure_reason TEXT, PRIMARY KEY (cell, idx));
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
_COLUMNS = "cell, idx, seed, ret, cost, goal, terminated, truncated, steps, failure_reason"
_NAMES = tuple(_COLUMNS.split(", "))
_COUNT, _NUMBER, _FLAG, _REASON = (
    "an integer >= 0",
    "a number",
    "0 or 1",
    "NULL or text",
)
#: what each column must hold, in ``_COLUMNS`` order
_EXPECTED = (_COUNT, _COUNT, _COUNT, _NUMBER, _NUMBER, _FLAG, _FLAG, _FLAG, _COUNT, _REASON)


def _valid(value: object, expected: str) -> bool:
    if expected == _COUNT:
        return type(value) is int and value >= 0
    if expected == _NUMBER:
        return type(value) in (int, float)
    if expected == _FLAG:
        return type(value) is int and value in (0, 1)
    return value is None or type(value) is str


def _shown(value: object) -> str:
    kind = {type(None): "NULL", int: "integer", float: "real", str: "text", bytes: "blob"}
    text = "" if value is None else f" {value!r}"
    if len(text) > 40:
        text = text[:37] + "..."
    return kind.get(type(value), type(value).__name__) + text


class EpisodeStore:
    """Append-only store of episode records (context manager; closes on exit)."""

    def __init__(self, path: Path, *, create: bool = True) -> None:
        path = Path(path)
        if not create and not path.is_file():
            raise DataError(
                f"{path} does not exist",
                field="episodes.sqlite",
                fix="pass the folder of a safecert certify run",
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        try:
            self._db = sqlite3.connect(path, timeout=30.0)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise DataError(
                f"{path} is not an episode store ({exc})", field="episodes.sqlite"
            ) from None

    def add(self, records: Iterable[EpisodeRecord]) -> int:
        """Insert records in one transaction; returns how many were new."""
        rows = [
            (
                r.cell,
                r.index,
                r.seed,
                float(r.ret),
                float(r.cost),
                int(r.goal),
                int(r.terminated),
                int(r.truncated),
                int(r.steps),
                r.failure_reason,
            )
            for r in records
        ]
        with self._db:
            before = self._db.total_changes
            self._db.executemany(
                f"INSERT OR IGNORE INTO episodes ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?)", rows
            )
            return self._db.total_changes - before

    def _execute(self, query: str, args: tuple = ()) -> sqlite3.Cursor:
        try:
            return self._db.execute(query, args)
        except sqlite3.DatabaseError as exc:
            raise DataError(
                f"{self.path} is not an episode store ({exc})", field="episodes.sqlite"
            ) from None

    def _rows(self, cell: int | None = None) -> Iterator[tuple]:
        """The raw episode rows in (cell, index) order, each checked (module docstring)."""
        query = f"SELECT rowid, {_COLUMNS} FROM episodes"
        args: tuple = ()
        if cell is not None:
            query += " WHERE cell = ?"
            args = (cell,)
        last = None
        for rowid, *values in self._execute(query + " ORDER BY cell, idx, rowid", args):
            where = f"table episodes, row {rowid} (cell {values[0]!r}, idx {values[1]!r})"
            for name, value, expected in zip(_NAMES, values, _EXPECTED, strict=True):
                if not _valid(value, expected):
                    raise DataError(
                        f"{where}: column {name} holds {_shown(value)}, expected {expected}",
                        field=str(self.path),
                        fix="the store was edited; rerun safecert certify",
                    )
            key = (values[0], values[1])
            if key == last:
                raise DataError(
                    f"{where}: (cell, idx) = {key} is stored twice",
                    field=str(self.path),
                    fix="the store was edited; rerun safecert certify",
                )
            last = key
            yield tuple(values)

    def records(self, cell: int | None = None) -> list[EpisodeRecord]:
        """Records ordered by (cell, index); a malformed row is a :class:`DataError`."""
        return [
            EpisodeRecord(c, i, s, float(ret), float(cost), bool(g), bool(te), bool(tr), st, why)
            for c, i, s, ret, cost, g, te, tr, st, why in self._rows(cell)
        ]

    def rows_sha256(self) -> str:
        """Canonical digest of the evidence: every episode row in (cell, index) order and the
        estimated observation ranges. Equal content gives an equal digest whatever SQLite's
        file layout; any edited, added or deleted row changes it."""
        digest = hashlib.sha256()
        digest.update(json.dumps(self.get_meta("obs_ranges"), sort_keys=True).encode())
        for row in self._rows():
            digest.update(b"\n" + json.dumps(list(row)).encode())
        return digest.hexdigest()

    def done(self) -> set[tuple[int, int]]:
        return set(self._execute("SELECT cell, idx FROM episodes").fetchall())

    def count(self, cell: int | None = None) -> int:
        if cell is None:
            return int(self._execute("SELECT COUNT(*) FROM episodes").fetchone()[0])
        return int(
            self._execute("SELECT COUNT(*) FROM episodes WHERE cell = ?", (cell,)).fetchone()[0]
        )

    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self._execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        if row is None:
            return default
        try:
            return json.loads(row[0])
        except (TypeError, ValueError):
            raise DataError(
                f"table meta, key {key!r}: value holds {_shown(row[0])}, expected JSON text",
                field=str(self.path),
                fix="the store was edited; rerun safecert certify",
            ) from None

    def set_meta(self, key: str, value: Any) -> None:
        with self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                (key, json.dumps(value, sort_keys=True)),
            )

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> EpisodeStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
