"""``episodes.sqlite``: every finished episode, written as it finishes.

SQLite in WAL mode, one transaction per batch of records. ``(cell, index)`` is the primary key and
inserts are ``INSERT OR IGNORE``, so a resumed run can never count an episode twice; a record is
either committed (and kept) or lost with the batch that was in flight (and rerun on resume —
its seed is fixed, so the rerun gives the same outcome). A committed batch survives a power loss,
not only a crash: from the first batch on the store syncs every commit (``synchronous=FULL``).
What a run writes before its first batch — the schema, its ``meta`` values — is committed at
``synchronous=NORMAL`` (consistent after a power loss, not synced at each commit) and made durable
by that first batch's sync, which covers every earlier write of the log (SQLite appends to the
log in order and syncs it whole): a batch that survived always has the meta it was run under,
without a disk sync per set-up step (each is milliseconds, more than a cheap episode).
A ``meta`` table holds JSON values (the config digest, estimated observation ranges, …).

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
from safecert.errors import ConfigError, DataError

_SCHEMA = """
BEGIN;
CREATE TABLE IF NOT EXISTS episodes (
    cell INTEGER NOT NULL, idx INTEGER NOT NULL, seed INTEGER NOT NULL,
    ret REAL NOT NULL, cost REAL NOT NULL, goal INTEGER NOT NULL,
    terminated INTEGER NOT NULL, truncated INTEGER NOT NULL, steps INTEGER NOT NULL,
    failure_reason TEXT, PRIMARY KEY (cell, idx));
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
COMMIT;
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
    """Append-only store of episode records (context manager; closes on exit).

    ``create=True`` (a run writing its episodes) creates the file and the schema if needed and
    opens it in WAL mode, synced at each commit from the first :meth:`add` on (module docstring). ``create=False`` (``rejudge``, ``verify``, reports, ``--replay``) opens
    an existing store **read-only** (SQLite ``mode=ro``, no pragma, no schema): reading never
    changes the evidence file, and a file without our tables — an empty file, another database —
    is one :class:`DataError` line saying what it holds and how to get a store.
    """

    def __init__(self, path: Path, *, create: bool = True) -> None:
        path = Path(path)
        self.path = path
        self._synced = False  # synchronous=FULL, from the first batch on
        if not create:
            self._db = self._open_read_only(path)
            return
        output_folder(path.parent)
        try:
            self._db = sqlite3.connect(path, timeout=30.0)
            self._db.execute("PRAGMA journal_mode=WAL")  # at SQLite's default, FULL
            self._db.execute("PRAGMA synchronous=NORMAL")  # the set-up: synced by the first batch
            self._db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise DataError(
                f"{path} is not an episode store ({exc})",
                field="episodes.sqlite",
                fix="choose a new --out folder, or remove the file if it is not a run's store",
            ) from None

    @staticmethod
    def _open_read_only(path: Path) -> sqlite3.Connection:
        if not path.is_file():
            raise DataError(
                f"{path} does not exist",
                field="episodes.sqlite",
                fix="pass the folder of a safecert certify run",
            )
        fix = "pass the folder of a finished safecert certify run, or rerun safecert certify"
        if path.stat().st_size == 0:
            raise DataError(
                f"{path} is an empty file, not an episode store", field="episodes.sqlite", fix=fix
            )
        # a store whose writer closed cleanly has no -wal file: all of it is in the main file,
        # which is then opened immutable (no lock, no -shm/-wal files created beside it); a -wal
        # file left by a crashed or running writer holds committed rows, so it is read through
        wal = path.with_name(path.name + "-wal").exists()
        query = "mode=ro" if wal else "mode=ro&immutable=1"
        try:
            db = sqlite3.connect(f"{path.resolve().as_uri()}?{query}", uri=True, timeout=30.0)
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
        except sqlite3.DatabaseError as exc:
            raise DataError(
                f"{path} is not an episode store ({exc})", field="episodes.sqlite", fix=fix
            ) from None
        missing = sorted({"episodes", "meta"} - tables)
        if missing:
            db.close()
            raise DataError(
                f"{path} has no {' or '.join(missing)} table, so it is not an episode store",
                field="episodes.sqlite",
                fix=fix,
            )
        return db

    def add(self, records: Iterable[EpisodeRecord]) -> int:
        """Insert records in one transaction, synced to disk before it returns (with everything
        written before it); returns how many were new."""
        if not self._synced:
            self._db.execute("PRAGMA synchronous=FULL")
            self._synced = True
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

    def clear_meta(self) -> None:
        """Forget every meta value (a store without episodes starting a run afresh)."""
        with self._db:
            self._db.execute("DELETE FROM meta")

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> EpisodeStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def output_folder(folder: Path, field: str = "out") -> Path:
    """Create ``folder`` (and its parents) for a run's outputs; a path that is a file, a device or
    cannot be created is one :class:`ConfigError` naming ``field``."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(
            f"{folder} is not a folder", field=field, fix="pass a folder (it is created if needed)"
        )
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot create the folder {folder} ({exc.strerror or exc})",
            field=field,
            fix="pass a folder you can write to",
        ) from None
    return folder


def open_run_store(
    path: Path, inputs: list[dict[str, Any]], config_path: Path, *, resume: bool
) -> EpisodeStore:
    """The store a run writes into, after checking that it may: one cell must never mix episodes
    of two policies or two configs.

    - A store with no episode yet (new, or left by a run whose pre-run check failed) is started
      afresh: its meta (inputs, config path, estimated ranges) is cleared, whatever config wrote it.
    - A store with episodes is refused without ``resume``; with ``resume`` it continues only with
      the config file that started it and with every input file's digest unchanged.

    ``inputs`` are the run's input digests (``FileDigest.model_dump(mode="json")``), recorded in
    the store's meta with ``config_path``. Raises :class:`ConfigError` naming ``out`` or
    ``resume``, which says which file differs and what to do.
    """
    store = EpisodeStore(path)
    try:
        _admit(store, inputs, Path(config_path).resolve(), resume=resume)
        store.set_meta("inputs", inputs)
        store.set_meta("config_path", str(Path(config_path).resolve()))
    except BaseException:
        store.close()
        raise
    return store


def _admit(
    store: EpisodeStore, inputs: list[dict[str, Any]], config_path: Path, *, resume: bool
) -> None:
    stored = store.count()
    if stored == 0:
        store.clear_meta()
        return
    out = store.path.parent
    if not resume:
        raise ConfigError(
            f"{out} already holds a run ({stored} episodes stored)",
            field="out",
            fix="pass --resume to continue it, or choose a new --out folder",
        )
    started = store.get_meta("config_path")
    if started is not None and Path(started) != config_path:
        gone = "" if Path(started).is_file() else " (no longer on disk)"
        raise ConfigError(
            f"this run was started with the config {started}{gone}, and --resume was given "
            f"{config_path}",
            field="resume",
            fix=f"resume with the config that started it: safecert certify {started} --out "
            f"{out} --resume, or run {config_path.name} into a new --out folder",
        )
    previous = store.get_meta("inputs")
    changed = None if previous is None else changed_input(previous, inputs)
    if changed is not None:
        raise ConfigError(
            f"{changed} since this run started ({stored} episodes stored under the old one)",
            field="resume",
            fix="restore it to resume, or start a new --out folder to run the changed inputs",
        )


def changed_input(previous: list[dict[str, Any]], now: list[dict[str, Any]]) -> str | None:
    """The first input (role and path) whose digest differs, appeared or disappeared, in words."""
    before = {(d["role"], d["path"]): d["sha256"] for d in previous}
    after = {(d["role"], d["path"]): d["sha256"] for d in now}
    for role, name in sorted(set(before) | set(after)):
        if (role, name) not in before:
            return f"the {role} file {name} is new"
        if (role, name) not in after:
            return f"the {role} file {name} is no longer an input"
        if before[role, name] != after[role, name]:
            return f"the {role} file {name} changed"
    return None
