"""Fleet-scale logs: transition count tables (issue 23, item 4; ``safecert shield count``).

A *count table* is a Parquet file with one row per logged transition kind::

    state: string (model label), action: string, next_state: string | null (null after halt),
    count: int64

and a header (Parquet key–value metadata ``safecert.counts``: JSON) naming the format, the model's
:func:`model_digest` and name, the steps and episodes counted and the source files. Tables are
*mergeable*: counts of tables with the same model digest add up (:func:`merge`), so counting can
run on many machines and certification on one; tables of different models (another state space,
other actions or other declared successors K(s,a)) are refused.

:func:`count_logs` reads step logs — JSON Lines or Parquet (columns ``episode``, ``state``,
``action``, ``next_state``; a state is a label or an object / struct of predicates) — through
DuckDB as one ``GROUP BY`` per file, out of core (a memory limit, spilling to a temporary folder,
:data:`MEMORY_LIMIT`), and checks every *kind* of transition against the model: known states and
actions, ``next_state`` a declared successor, nothing leaving an unsafe state. What a count table
does not check, unlike ``--logs``: the order of steps within an episode (``t`` rising by one, a
``state`` equal to the previous ``next_state``) — counting is order-free by design. Episodes are the
distinct ``episode`` values per source file; merged tables add them (episode names are assumed
distinct across files).

Counts and confidence sets: a count table knows how often each row went where, not in which
order, so it supports only the anytime sets (every visit counted,
:func:`safecert.shield.confidence.anytime_beta`). Committed-budget sets use the *first* n0 visits
of each row in log order — a rule a count table cannot apply — so they are refused
(:func:`estimates_from_counts`); taking some n0 of the counts instead would pick visits after
seeing their outcomes and void Lemma 2.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from safecert.errors import ConfigError, DataError
from safecert.shield.estimate import RowEstimates
from safecert.shield.model import ShieldModel, load_model

FORMAT = 1
HEADER_KEY = b"safecert.counts"
#: DuckDB's memory limit while counting (it spills to a temporary folder beyond it)
MEMORY_LIMIT = "1GB"
#: DuckDB worker threads
THREADS = 2


@dataclass(frozen=True)
class CountTable:
    """Transition counts of one model: ``counts[s, a, j]`` aligned with ``model.succ`` (halt:
    position 0), ``steps`` = Σ counts, ``episodes``, the ``sources`` counted (file names and
    sizes) and the model digest they belong to."""

    digest: str
    model_name: str
    counts: np.ndarray
    steps: int
    episodes: int
    sources: list[dict[str, Any]]


def model_digest(model: ShieldModel) -> str:
    """sha256 of what a count depends on: the states (labels or predicates), the actions, the
    halt action and every declared K(s,a) and the unsafe set — not T, δ, η, the budget or the goal,
    so one count table serves certificates of any horizon or confidence."""
    doc = {
        "states": list(model.labels),
        "predicates": model.predicates,
        "actions": list(model.actions),
        "halt": model.halt,
        "successors": model.succ.tolist(),
        "unsafe": np.flatnonzero(model.unsafe).tolist(),
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _connect(spill: Path):
    from safecert.extras import require_extra

    require_extra("shield")
    import duckdb

    con = duckdb.connect(":memory:")
    con.execute(f"SET temp_directory = '{_quote(str(spill))}'")
    con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
    con.execute(f"SET threads = {THREADS}")
    con.execute("SET preserve_insertion_order = false")
    con.execute("SET enable_progress_bar = false")  # stdout belongs to the command (--json)
    return con


def _quote(text: str) -> str:
    """``text`` inside a single-quoted SQL string literal."""
    return text.replace("'", "''")


def _source(path: Path) -> str:
    """The DuckDB table function reading one step log (by suffix: .parquet, else JSON Lines)."""
    quoted = f"'{_quote(str(path))}'"
    if path.suffix.lower() == ".parquet":
        return f"read_parquet({quoted})"
    cols = "{episode: 'VARCHAR', state: 'JSON', action: 'VARCHAR', next_state: 'JSON'}"
    return f"read_json({quoted}, format = 'newline_delimited', columns = {cols})"


def _is_count_table(path: Path) -> bool:
    """A Parquet file with the ``safecert.counts`` header (a file that is not Parquet is not; the
    step-log reader then reports it in one line)."""
    if path.suffix.lower() != ".parquet":
        return False
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        meta = pq.read_schema(path).metadata or {}
    except (pa.ArrowException, OSError):
        return False
    return HEADER_KEY in meta


def count_logs(model: ShieldModel, paths: list[Path]) -> CountTable:
    """Count the transitions of step logs and merge count tables (module docstring). Inputs that
    are count tables (Parquet with the ``safecert.counts`` header) are merged as they are; every
    other file is counted. Raises :class:`DataError` naming the file and the offending transition
    kind (and how often it occurs)."""
    if not paths:
        raise ConfigError("no input files", field="LOGS", fix="pass JSONL or Parquet step logs")
    counts = np.zeros(model.succ.shape, dtype=np.int64)
    steps = episodes = 0
    sources: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="safecert-count-") as spill:
        con = None
        try:
            for path in map(Path, paths):
                if not path.is_file():
                    raise DataError(
                        f"{path} does not exist", field="LOGS", fix="pass existing files"
                    )
                if _is_count_table(path):
                    table = read_counts(path, model)
                    counts += table.counts
                    steps, episodes = steps + table.steps, episodes + table.episodes
                    sources += table.sources
                    continue
                con = con or _connect(Path(spill))
                part, eps = _count_file(con, model, path)
                counts += part
                steps, episodes = steps + int(part.sum()), episodes + eps
                sources.append({"file": path.name, "bytes": path.stat().st_size})
        finally:
            if con is not None:
                con.close()
    return CountTable(model_digest(model), model.name, counts, steps, episodes, sources)


def _count_file(con: Any, model: ShieldModel, path: Path) -> tuple[np.ndarray, int]:
    import duckdb

    src = _source(path)
    try:
        groups = con.execute(
            f"SELECT to_json(state)::VARCHAR, action, to_json(next_state)::VARCHAR, count(*) "
            f"FROM {src} GROUP BY ALL"
        ).fetchall()
        episodes = con.execute(f"SELECT count(DISTINCT episode) FROM {src}").fetchone()[0]
    except duckdb.Error as exc:
        first = str(exc).strip().splitlines()[0]
        raise DataError(
            f"cannot be read as a step log ({first})",
            field=path.name,
            fix="JSON Lines or Parquet with episode, state, action, next_state",
        ) from None
    counts = np.zeros(model.succ.shape, dtype=np.int64)
    for state, action, nxt, n in groups:
        s, a, pos = _transition(model, path.name, state, action, nxt, n)
        counts[s, a, pos] += n
    return counts, int(episodes)


def _transition(
    model: ShieldModel, name: str, state: str | None, action: str | None, nxt: str | None, n: int
) -> tuple[int, int, int]:
    """(s, a, position of next_state in K(s,a)) of one transition kind, checked as the log reader
    checks one step."""
    where = f"{name} ({n} steps with state {state}, action {action}, next_state {nxt})"
    if state is None or action is None:
        raise DataError("missing state or action", field=where, fix="see docs/shield.md")
    s = model.state_index(json.loads(state), field=f"{where}.state")
    a = model.action_index(action, field=f"{where}.action")
    if a == model.halt:
        return s, a, 0
    if nxt is None or json.loads(nxt) is None:
        raise DataError("missing next_state", field=where, fix="only halt may omit it")
    s2 = model.state_index(json.loads(nxt), field=f"{where}.next_state")
    return s, a, _position(model, where, s, a, s2)


def _position(model: ShieldModel, where: str, s: int, a: int, s2: int) -> int:
    """The position of s2 in K(s,a), or the log reader's error."""
    pos = model.successor_position(s, a, s2)
    if pos < 0:
        raise DataError(
            f"{model.labels[s2]} is not a declared successor of "
            f"({model.labels[s]}, {model.actions[a]})",
            field=f"{where}.next_state",
            fix="enlarge [successors] in the model (always safe) or fix the log",
        )
    return pos


def write_counts(table: CountTable, model: ShieldModel, out: Path) -> Path:
    """Write ``table`` as a count-table Parquet file (rows sorted by state, action, next_state
    index; zero counts left out)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    s, a, j = np.nonzero(table.counts)
    nxt = [
        None if int(ai) == model.halt else model.labels[int(model.succ[si, ai, ji])]
        for si, ai, ji in zip(s, a, j, strict=True)
    ]
    header = {
        "format": FORMAT,
        "model_digest": table.digest,
        "model": table.model_name,
        "steps": table.steps,
        "episodes": table.episodes,
        "sources": table.sources,
    }
    arrow = pa.table(
        {
            "state": pa.array([model.labels[int(x)] for x in s], pa.string()),
            "action": pa.array([model.actions[int(x)] for x in a], pa.string()),
            "next_state": pa.array(nxt, pa.string()),
            "count": pa.array(table.counts[s, a, j], pa.int64()),
        }
    ).replace_schema_metadata({HEADER_KEY: json.dumps(header, sort_keys=True).encode()})
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(arrow, out)
    return out


def count_files(model_path: Path, paths: list[Path], out: Path) -> CountTable:
    """``safecert shield count``: :func:`count_logs` of ``paths`` for the model at
    ``model_path``, written to ``out`` (:func:`write_counts`); nothing is written when a file is
    refused."""
    model = load_model(model_path)
    table = count_logs(model, paths)
    write_counts(table, model, out)
    return table


def read_counts(path: Path, model: ShieldModel) -> CountTable:
    """A count table for ``model``; refused (one DataError line) when it is not one, or when its
    header names another model digest."""
    from safecert.extras import require_extra

    require_extra("shield")
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    field = f"--counts {path.name}"
    if not path.is_file():
        raise DataError(f"{path} does not exist", field=field, fix="pass a count table")
    try:
        arrow = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"is not Parquet ({exc})", field=field) from None
    raw = (arrow.schema.metadata or {}).get(HEADER_KEY)
    if raw is None:
        raise DataError(
            "has no safecert.counts header", field=field, fix="write it with safecert shield count"
        )
    try:
        header = json.loads(raw)
        steps, episodes = int(header["steps"]), int(header["episodes"])
    except (ValueError, TypeError, KeyError):
        raise DataError("has a garbled safecert.counts header", field=field) from None
    if header.get("format") != FORMAT:
        raise DataError(f"count table format {header.get('format')!r}", field=field)
    digest = model_digest(model)
    if header.get("model_digest") != digest:
        raise DataError(
            f"was counted for model {header.get('model')!r} (digest "
            f"{str(header.get('model_digest'))[:12]}…), not this model ({digest[:12]}…)",
            field=field,
            fix="count the logs again with this --model",
        )
    cols = arrow.to_pydict()
    if set(cols) != {"state", "action", "next_state", "count"}:
        raise DataError(
            f"has columns {sorted(cols)}", field=field, fix="state, action, next_state, count"
        )
    labels = {label: i for i, label in enumerate(model.labels)}
    actions = {name: i for i, name in enumerate(model.actions)}
    counts = np.zeros(model.succ.shape, dtype=np.int64)
    for state, action, nxt, n in zip(
        cols["state"], cols["action"], cols["next_state"], cols["count"], strict=True
    ):
        where = f"{field} ({state}, {action}, {nxt})"
        s, a = labels.get(state), actions.get(action)
        if s is None or a is None or (a != model.halt and nxt not in labels):
            raise DataError("names a state or action the model does not have", field=where)
        if n is None or n < 0:
            raise DataError("has a negative or missing count", field=where)
        pos = 0 if a == model.halt else _position(model, where, s, a, labels[nxt])
        counts[s, a, pos] += n
    if int(counts.sum()) != steps:
        raise DataError(
            f"counts sum to {int(counts.sum())}, the header says {steps} steps", field=field
        )
    sources = header.get("sources", [])
    return CountTable(digest, str(header.get("model")), counts, steps, episodes, list(sources))


def merge(model: ShieldModel, paths: list[Path]) -> CountTable:
    """The sum of count tables ``paths`` (each checked by :func:`read_counts`)."""
    if not paths:
        raise ConfigError("no count tables", field="counts")
    tables = [read_counts(p, model) for p in paths]
    return CountTable(
        tables[0].digest,
        model.name,
        sum((t.counts for t in tables), np.zeros(model.succ.shape, np.int64)),
        sum(t.steps for t in tables),
        sum(t.episodes for t in tables),
        [src for t in tables for src in t.sources],
    )


def estimates_from_counts(model: ShieldModel, table: CountTable, *, anytime: bool) -> RowEstimates:
    """Anytime row estimates from merged counts (every visit); committed-budget sets are refused
    (module docstring)."""
    require_anytime(anytime)
    visits = table.counts.sum(axis=-1)
    k = model.k.copy()
    return RowEstimates(
        n0=np.where(k >= 2, visits, 0),
        visits=visits,
        counts=np.where(k[..., None] >= 2, table.counts, 0),
        k=k,
        steps=table.steps,
        episodes=table.episodes,
        anytime=True,
    )


def require_anytime(anytime: bool) -> None:
    """Count tables support anytime sets only (module docstring): a ConfigError otherwise."""
    if not anytime:
        raise ConfigError(
            "count tables are order-free; committed-budget sets use the first n0 visits of each "
            "row in log order",
            field="counts",
            fix="use --anytime (or anytime = true in the model), or certify from --logs",
        )
