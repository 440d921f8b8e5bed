"""``episodes.sqlite``: every finished episode, written as it finishes.

SQLite in WAL mode, one transaction per batch of records. ``(cell, index)`` is the primary key and
inserts are ``INSERT OR IGNORE``, so a resumed run can never count an episode twice; a record is
either committed (and kept) or lost with the batch that was in flight (and rerun on resume —
its seed is fixed, so the rerun gives the same outcome). ``synchronous=FULL``: a committed batch survives a power loss, not only a crash. A ``meta`` table holds JSON values (the
config digest, estimated observation ranges, …).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterable
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

    def records(self, cell: int | None = None) -> list[EpisodeRecord]:
        """Records ordered by (cell, index)."""
        query = f"SELECT {_COLUMNS} FROM episodes"
        args: tuple = ()
        if cell is not None:
            query += " WHERE cell = ?"
            args = (cell,)
        rows = self._db.execute(query + " ORDER BY cell, idx", args).fetchall()
        return [
            EpisodeRecord(c, i, s, ret, cost, bool(g), bool(te), bool(tr), st, why)
            for c, i, s, ret, cost, g, te, tr, st, why in rows
        ]

    def rows_sha256(self) -> str:
        """Canonical digest of the evidence: every episode row in (cell, index) order and the
        estimated observation ranges. Equal content gives an equal digest whatever SQLite's
        file layout; any edited, added or deleted row changes it."""
        digest = hashlib.sha256()
        digest.update(json.dumps(self.get_meta("obs_ranges"), sort_keys=True).encode())
        for row in self._db.execute(f"SELECT {_COLUMNS} FROM episodes ORDER BY cell, idx"):
            digest.update(b"\n" + json.dumps(list(row)).encode())
        return digest.hexdigest()

    def done(self) -> set[tuple[int, int]]:
        return set(self._db.execute("SELECT cell, idx FROM episodes").fetchall())

    def count(self, cell: int | None = None) -> int:
        if cell is None:
            return int(self._db.execute("SELECT COUNT(*) FROM episodes").fetchone()[0])
        return int(
            self._db.execute("SELECT COUNT(*) FROM episodes WHERE cell = ?", (cell,)).fetchone()[0]
        )

    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return default if row is None else json.loads(row[0])

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
