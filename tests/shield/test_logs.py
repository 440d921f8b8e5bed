"""Streaming JSONL log reader: valid steps and one-line errors for every contradiction."""

from __future__ import annotations

import json

import pytest

from safecert.errors import DataError
from safecert.shield.logs import iter_steps
from safecert.shield.model import model_from_dict

from .test_model import LABELS, SANDBOX

S0 = SANDBOX["initial"]
CONF = {**S0, "confirmed": True}


def _write(tmp_path, recs):
    p = tmp_path / "logs.jsonl"
    p.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in recs))
    return p


def test_reads_valid_steps(tmp_path):
    m = model_from_dict(SANDBOX)
    p = _write(
        tmp_path,
        [
            {"episode": "e1", "t": 0, "state": S0, "action": "read", "next_state": CONF},
            {"episode": 2, "t": 0, "state": S0, "action": "read", "next_state": S0},
            "",
            {"episode": "e1", "t": 1, "state": CONF, "action": "halt"},
        ],
    )
    steps = list(iter_steps(p, m))
    assert [s.episode for s in steps] == ["e1", "2", "e1"]
    assert steps[0].state == m.initial and steps[0].next_state == m.state_index(CONF)
    assert steps[2].action == m.halt and steps[2].next_state == m.sink and steps[2].line == 4


BAD = [
    ("{not json", "not valid JSON"),
    ([1, 2], "JSON object"),
    ({"episode": "e", "t": 0, "state": S0, "action": "read"}, "missing next_state"),
    ({"episode": "e", "t": 0, "state": {**S0, "x": True}, "action": "halt"}, "unknown predicate"),
    ({"episode": "e", "t": 0, "state": {**S0, "harm": "no"}, "action": "halt"}, "not a boolean"),
    ({"episode": "e", "t": 0, "state": S0, "action": "fly", "next_state": S0}, "unknown action"),
    ({"episode": "e", "t": -1, "state": S0, "action": "halt"}, "non-negative"),
    ({"episode": "e", "t": 0, "state": S0, "action": "halt", "x": 1}, "unknown key"),
    (
        {
            "episode": "e",
            "t": 0,
            "state": S0,
            "action": "read",
            "next_state": {**S0, "write": True},
        },
        "not a declared successor",
    ),
    (
        {"episode": "e", "t": 0, "state": {**S0, "harm": True}, "action": "read", "next_state": S0},
        "absorbing unsafe",
    ),
]


@pytest.mark.parametrize(("rec", "msg"), BAD)
def test_bad_lines(tmp_path, rec, msg):
    m = model_from_dict(SANDBOX)
    p = _write(tmp_path, [{"episode": "ok", "t": 0, "state": S0, "action": "halt"}, rec])
    with pytest.raises(DataError, match=msg) as err:
        list(iter_steps(p, m))
    assert "logs.jsonl:2" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("second", "msg"),
    [
        ({"episode": "e", "t": 2, "state": CONF, "action": "halt"}, "follows t=0"),
        ({"episode": "e", "t": 1, "state": S0, "action": "halt"}, "differs from the previous"),
    ],
)
def test_episode_order_and_continuity(tmp_path, second, msg):
    m = model_from_dict(SANDBOX)
    first = {"episode": "e", "t": 0, "state": S0, "action": "read", "next_state": CONF}
    with pytest.raises(DataError, match=msg):
        list(iter_steps(_write(tmp_path, [first, second]), m))


def test_step_after_halt(tmp_path):
    m = model_from_dict(SANDBOX)
    recs = [
        {"episode": "e", "t": 0, "state": S0, "action": "halt"},
        {"episode": "e", "t": 1, "state": S0, "action": "halt"},
    ]
    with pytest.raises(DataError, match="after halt"):
        list(iter_steps(_write(tmp_path, recs), m))


def test_label_mode_and_missing_file(tmp_path):
    m = model_from_dict(LABELS)
    p = _write(
        tmp_path, [{"episode": "e", "t": 0, "state": "a", "action": "go", "next_state": "b"}]
    )
    assert list(iter_steps(p, m))[0].pos == 1
    p = _write(
        tmp_path, [{"episode": "e", "t": 0, "state": "zz", "action": "go", "next_state": "b"}]
    )
    with pytest.raises(DataError, match="unknown state 'zz'"):
        list(iter_steps(p, m))
    with pytest.raises(DataError, match="does not exist"):
        list(iter_steps(tmp_path / "nope.jsonl", m))
