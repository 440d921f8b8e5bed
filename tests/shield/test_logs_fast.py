"""The fast log reader (orjson, column checks) against the reference reader (json, line by line).

Same steps, same estimates, and the same one-line error at the same line — on valid logs and on
fuzzed ones: bad bytes, non-UTF-8, huge numbers, deep nesting, wrong types, unknown names,
undeclared successors, broken episodes, blank and over-long lines — with blocks small enough that
every log spans many of them (a line split across reads included).
"""

from __future__ import annotations

import json
from pathlib import Path
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from safecert.errors import DataError
from safecert.shield import logs
from safecert.shield.estimate import estimate
from safecert.shield.logs import MAX_T, StepLog, iter_steps, reference_steps
from safecert.shield.model import load_model, model_from_dict

from .test_model import SANDBOX

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GRID = load_model(EXAMPLES / "shield" / "grid.toml")
GRID_LINES = (EXAMPLES / "shield" / "grid_logs.jsonl").read_bytes().splitlines()[:120]
PRED = model_from_dict(SANDBOX)


def _predicate_lines(seed: int = 0, episodes: int = 12) -> list[bytes]:
    """A valid predicate-mode log: random walks over K(s,a), interleaved, some ending in halt
    (with and without next_state)."""
    rng = np.random.default_rng(seed)
    out = []
    for e in range(episodes):
        s = PRED.initial
        for t in range(int(rng.integers(1, 6))):
            if PRED.unsafe[s] or rng.random() < 0.2:
                rec = {"episode": e, "t": t, "state": PRED.state_repr(s), "action": "halt"}
                if rng.random() < 0.5:
                    rec["next_state"] = None
                out.append(json.dumps(rec).encode())
                break
            a = int(rng.integers(0, len(PRED.actions) - 1))
            s2 = int(rng.choice(PRED.successors(s, a)))
            rec = {
                "episode": f"p{e}",
                "t": t,
                "state": PRED.state_repr(s),
                "action": PRED.actions[a],
                "next_state": PRED.state_repr(s2),
            }
            out.append(json.dumps(rec).encode())
            s = s2
    order = rng.permutation(len(out))  # interleave episodes, keeping each one's order
    firsts = sorted(order[: len(out)])
    return [out[i] for i in firsts]


PRED_LINES = _predicate_lines()

DEEP = b"[" * 1100 + b"]" * 1100
#: replacement values (raw JSON text) for one field of a valid record
VALUES = [
    b"null", b"true", b"false", b"0", b"1", b"-1", b"1.0", b"1e400", b"NaN", b"-Infinity",
    b'"x"', b'"\\ud800"', b"[]", b"{}", b'{"a": true}', b"9" * 5000, b"18446744073709551616",
    str(MAX_T).encode(), str(MAX_T + 1).encode(), DEEP, b'"r0c0"', b'"r0c1"', b'"up"', b'"halt"',
    b'{"in_prod": false, "write": false, "confirmed": false, "harm": false}',
    b'{"in_prod": 0, "write": false, "confirmed": false, "harm": false}',
]  # fmt: skip
#: whole replacement lines
RAW = [
    b"", b"   ", b"\r", b"\x1c", b"\xff", b"\xef\xbb\xbf{}", b"{not json", b"[1, 2]", b"42",
    b'"s"', DEEP, b"x" * 400, b"\xed\xa0\x80",
]  # fmt: skip
FIELDS = ["episode", "t", "state", "action", "next_state", "extra"]


def _with_field(line: bytes, field: str, value: bytes | None) -> bytes:
    """``line`` (a JSON object) with ``field`` set to the raw ``value`` (None: removed); any
    other line unchanged."""
    try:
        rec = json.loads(line)
    except ValueError:
        return line
    if not isinstance(rec, dict):
        return line
    parts = [
        json.dumps(k).encode() + b": " + json.dumps(v).encode()
        for k, v in rec.items()
        if k != field
    ]
    if value is not None:
        parts.append(json.dumps(field).encode() + b": " + value)
    return b"{" + b", ".join(parts) + b"}"


mutation = st.one_of(
    st.tuples(st.just("field"), st.sampled_from(FIELDS), st.sampled_from([None, *VALUES])),
    st.tuples(st.just("raw"), st.sampled_from(RAW), st.none()),
    st.tuples(st.just("swap"), st.none(), st.none()),
    st.tuples(st.just("duplicate"), st.none(), st.none()),
    st.tuples(st.just("cut"), st.integers(1, 60), st.none()),
    st.tuples(st.just("halt"), st.sampled_from([None, *VALUES]), st.none()),
    st.tuples(st.just("dup_key"), st.sampled_from(FIELDS[:5]), st.sampled_from(VALUES[:6])),
)


def _mutate(lines: list[bytes], muts, where: list[int]) -> list[bytes]:
    lines = list(lines)
    for (kind, a, b), i in zip(muts, where, strict=True):
        i %= len(lines)
        if kind == "field":
            lines[i] = _with_field(lines[i], a, b)
        elif kind == "raw":
            lines[i] = a
        elif kind == "swap" and i + 1 < len(lines):
            lines[i], lines[i + 1] = lines[i + 1], lines[i]
        elif kind == "duplicate":
            lines.insert(i, lines[i])
        elif kind == "cut":
            lines[i] = lines[i][:a]
        elif kind == "halt":
            line = _with_field(lines[i], "action", b'"halt"')
            lines[i] = _with_field(line, "next_state", a)
        elif kind == "dup_key" and lines[i].startswith(b"{"):
            lines[i] = lines[i][:-1] + b", " + json.dumps(a).encode() + b": " + b + b"}"
    return lines


def _outcome(steps) -> tuple[list, str | None]:
    """Every step yielded before the first error, and the error's one line."""
    seen = []
    try:
        for step in steps:
            seen.append(step)
    except DataError as exc:
        return seen, str(exc)
    return seen, None


def _check_same(tmp_path: Path, model, lines: list[bytes], newline_at_end: bool = True) -> None:
    path = tmp_path / "logs.jsonl"
    path.write_bytes(b"\n".join(lines) + (b"\n" if newline_at_end else b""))
    fast, ref = _outcome(iter_steps(path, model)), _outcome(reference_steps(path, model))
    assert fast == ref
    if ref[1] is None:  # the column path of estimate() counts exactly what the steps say
        a, b = estimate(model, iter_steps(path, model)), estimate(model, ref[0])
        assert a.episodes == b.episodes and a.steps == b.steps == len(ref[0])
        assert np.array_equal(a.counts, b.counts) and np.array_equal(a.visits, b.visits)
    else:
        with pytest.raises(DataError) as err:
            estimate(model, iter_steps(path, model))
        assert str(err.value) == ref[1] and "\n" not in ref[1]


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.sampled_from(["grid", "predicates"]),
    st.lists(mutation, max_size=3),
    st.lists(st.integers(0, 10_000), min_size=3, max_size=3),
    st.sampled_from([64, 300, 1 << 22]),
    st.booleans(),
)
def test_fast_reader_equals_reference_on_fuzzed_logs(
    tmp_path, which, muts, where, block, newline_at_end
):
    model, lines = (GRID, GRID_LINES) if which == "grid" else (PRED, PRED_LINES)
    lines = _mutate(lines, muts, where[: len(muts)])
    with patch.object(logs, "BLOCK_BYTES", block), patch.object(logs, "MAX_LINE_BYTES", 350):
        _check_same(tmp_path, model, lines, newline_at_end)


@pytest.mark.parametrize(
    ("line", "says"),
    [
        (b'{"episode": "e", "t": 0, "state": "r0c0", "action": "\xff"}', "not UTF-8"),
        (b'{"episode": "e", "t": ' + b"9" * 5000 + b', "state": "r0c0"}', "not usable JSON"),
        (DEEP, "too deeply"),
        (
            b'{"episode": "e", "t": 18446744073709551616, "state": "r0c0", "action": "halt"}',
            "t must",
        ),
        (b'{"episode": "e", "t": 0, "state": "r0c0", "action": "halt", "next_state": NaN}', ""),
    ],
)
def test_named_bad_lines_fail_alike_with_their_number(tmp_path, line, says):
    lines = [*GRID_LINES[:7], line, *GRID_LINES[7:]]
    _check_same(tmp_path, GRID, lines)
    path = tmp_path / "logs.jsonl"
    fast = _outcome(iter_steps(path, GRID))
    if says:  # the NaN in a halt's ignored next_state is accepted by both readers
        assert fast[1] is not None and "logs.jsonl:8" in fast[1] and says in fast[1]
    else:
        assert fast[1] is None and fast[0][7].action == GRID.halt


def test_long_line_split_across_reads_and_blank_lines(tmp_path):
    lines = [*GRID_LINES[:3], b"", b"  \r", *GRID_LINES[3:6], b"x" * 500]
    with patch.object(logs, "BLOCK_BYTES", 100), patch.object(logs, "MAX_LINE_BYTES", 300):
        _check_same(tmp_path, GRID, lines)
        fast = _outcome(iter_steps(tmp_path / "logs.jsonl", GRID))
    assert "logs.jsonl:9" in fast[1] and "longer than 300 bytes" in fast[1]
    assert [s.line for s in fast[0]] == [1, 2, 3, 6, 7, 8]


def test_blocks_are_columns_of_the_steps(tmp_path):
    path = tmp_path / "logs.jsonl"
    path.write_bytes(b"\n".join(PRED_LINES) + b"\n")
    with patch.object(logs, "BLOCK_BYTES", 256):
        log = iter_steps(path, PRED)
        assert isinstance(log, StepLog)
        from_blocks = [st for block in log.blocks() for st in block.steps()]
    assert from_blocks == list(reference_steps(path, PRED))
    assert log.episodes == len({st.episode for st in from_blocks})
    assert list(log) == from_blocks and log.episodes == len({st.episode for st in from_blocks})
