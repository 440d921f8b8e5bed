"""Regressions of issue 14 for the shield's inputs: each bad model or log is one line, exit 2,
before any work — through the real ``safecert shield certify`` command."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safecert.shield.layout import MAX_LAYOUT_SIDE, check_cell_format
from safecert.shield.logs import MAX_T
from safecert.shield.model import MAX_HORIZON, MAX_PER_ROW, MAX_STATES
from tests.blackbox.pipeline_helpers import cli_here  # noqa: F401 - the fixture

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "shield"
MODEL = (EXAMPLES / "grid.toml").read_text()
LOG_LINES = (EXAMPLES / "grid_logs.jsonl").read_bytes().splitlines(keepends=True)[:200]


def run(cli, tmp_path: Path, model: str = MODEL, logs: bytes = b"".join(LOG_LINES)):
    (tmp_path / "m.toml").write_text(model)
    (tmp_path / "l.jsonl").write_bytes(logs)
    start = time.monotonic()
    result = cli(
        "shield",
        "certify",
        "--model",
        tmp_path / "m.toml",
        "--logs",
        tmp_path / "l.jsonl",
        "--out",
        tmp_path / "out",
    )
    return result, time.monotonic() - start


def test_the_example_itself_runs(cli_here, tmp_path):  # noqa: F811
    result, _ = run(cli_here, tmp_path)
    assert result.code == 0, result.stderr


@pytest.mark.parametrize(
    ("old", "new", "field", "says"),
    [
        ("delta = 0.05", "delta = 0.05\neta = inf", "eta", "finite"),
        ("delta = 0.05", "delta = 0.05\neta = nan", "eta", "finite"),
        ('"fraction_of_even_share" = 0.7', '"fraction_of_even_share" = inf', "budget", "finite"),
        (
            'budget = { "fraction_of_even_share" = 0.7, "episodes" = 1000 }',
            "budget = { per_row = 1e20 }",
            "budget.per_row",
            "integer",
        ),
        (
            'budget = { "fraction_of_even_share" = 0.7, "episodes" = 1000 }',
            "budget = { per_row = 100000000000000000000 }",
            "budget.per_row",
            str(MAX_PER_ROW),
        ),
        (
            '"fraction_of_even_share" = 0.7, "episodes" = 1000',
            '"fraction_of_even_share" = 1e6, "episodes" = 1000000000',
            "budget.fraction_of_even_share",
            str(MAX_PER_ROW),
        ),
        (
            'cell_format = "r{row}c{col}"',
            'cell_format = "r{row}c{column}"',
            "layout.cell_format",
            "column",
        ),
        ('cell_format = "r{row}c{col}"', 'cell_format = "r{row}c{"', "layout.cell_format", "{row}"),
        (
            'cell_format = "r{row}c{col}"',
            'cell_format = "r{row:3000000000}c{col}"',
            "layout.cell_format",
            "{row:3000000000}",
        ),
        (
            'cell_format = "r{row}c{col}"',
            'cell_format = "r{row.real}c{col[0]}"',
            "layout.cell_format",
            "{row.real}",
        ),
        ("horizon = 16", "horizon = 1e9", "horizon", "integer"),
        ("horizon = 16", "horizon = 1000000000", "horizon", str(MAX_HORIZON)),
        ("rows = 7", "rows = 30000", "layout.rows", str(MAX_LAYOUT_SIDE)),
        ("cols = 7", "cols = 30000", "layout.cols", str(MAX_LAYOUT_SIDE)),
    ],
)
def test_bad_model_values_are_one_line(cli_here, tmp_path, old, new, field, says):  # noqa: F811
    assert old in MODEL
    result, _ = run(cli_here, tmp_path, MODEL.replace(old, new))
    assert result.code == 2, result.stderr
    line = result.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert field in line and says in line, line


def test_a_300x300_label_grid_is_refused_at_once(cli_here, tmp_path):  # noqa: F811
    labels = ", ".join(f'"r{r}c{c}"' for r in range(300) for c in range(300))
    model = (
        f'states = [{labels}]\nactions = ["up", "halt"]\ninitial = "r0c0"\n'
        'unsafe = ["r1c1"]\nhorizon = 10\ndelta = 0.05\nbudget = { per_row = 10 }\n'
    )
    result, took = run(cli_here, tmp_path, model)
    assert result.code == 2 and f"at most {MAX_STATES}" in result.stderr, result.stderr
    assert took < 30  # the old n x n identity matrix alone was 1 TB


def test_value_iteration_work_is_bounded(cli_here, tmp_path):  # noqa: F811
    preds = [f"p{i}" for i in range(12)]
    model = (
        f'predicates = {preds}\nactions = ["a", "halt"]\n'
        f"initial = {{ {', '.join(f'{p} = false' for p in preds)} }}\n"
        f'unsafe = "p11"\nhorizon = {MAX_HORIZON}\ndelta = 0.05\nbudget = {{ per_row = 10 }}\n'
        f"[successors]\na = {preds[:8]}\n"
    ).replace("'", '"')
    result, took = run(cli_here, tmp_path, model)
    assert result.code == 2 and "value iteration would take" in result.stderr, result.stderr
    assert "horizon" in result.stderr and took < 30


def bad_line(line: bytes) -> bytes:
    return b"".join(LOG_LINES[:5]) + line + b"\n" + b"".join(LOG_LINES[5:])


@pytest.mark.parametrize(
    ("line", "says"),
    [
        (b'{"episode": "x", "t": ' + b"9" * 5000 + b', "state": "r0c0", "action": "up"}', "digits"),
        (b'{"episode": "x", "t": ' + str(MAX_T + 1).encode() + b', "state": "r0c0"', "JSON"),
        (
            b'{"episode": "x", "t": '
            + str(MAX_T + 1).encode()
            + b', "state": "r0c0", "action": "halt"}',
            str(MAX_T),
        ),
        (b'{"episode": "caf\xe9", "t": 0, "state": "r0c0", "action": "halt"}', "UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "deeply"),
    ],
)
def test_bad_log_lines_are_one_line_with_their_number(cli_here, tmp_path, line, says):  # noqa: F811
    result, _ = run(cli_here, tmp_path, logs=bad_line(line))
    assert result.code == 2, result.stderr
    msg = result.stderr.strip()
    assert "\n" not in msg and "l.jsonl:6" in msg and says in msg, msg


@settings(max_examples=300, deadline=None)
@given(st.text("{}:!.[]0123456789rowcldx>s", max_size=40))
def test_an_accepted_cell_format_fills_every_cell_with_a_short_label(text):
    """Whatever ``check_cell_format`` accepts fills without error for every row and column, into
    a label bounded by its length and two widths below 100; what it refuses is a ValueError."""
    try:
        check_cell_format(text)
    except ValueError:
        return
    for row, col in ((0, 0), (MAX_LAYOUT_SIDE - 1, 7)):
        label = text.format(row=row, col=col)
        assert len(label) <= len(text) + 2 * 99 * text.count("{")


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda p: os.mkfifo(p), "not a regular file (it is a FIFO)"),
        (lambda p: p.write_text("a" + ".a" * 5000 + " = 1\n"), "more than 64 parts"),
        (lambda p: p.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n"), "nested over 64"),
    ],
)
def test_an_action_rules_file_is_read_under_the_config_limits(tmp_path, make, says):
    """``--action-map rules.toml`` goes through the shared TOML reader: a FIFO is refused without
    blocking, a key or nesting bomb before tomllib sees it."""
    from safecert.errors import ConfigError
    from safecert.shield.action_rules import load_action_rules

    path = tmp_path / "rules.toml"
    make(path)
    raised: list[BaseException] = []

    def load() -> None:
        try:
            load_action_rules(path)
        except BaseException as exc:
            raised.append(exc)

    reader = threading.Thread(target=load, daemon=True)  # a blocked open must not hang the suite
    reader.start()
    reader.join(timeout=10)
    assert not reader.is_alive(), "load_action_rules blocked"
    assert len(raised) == 1 and isinstance(raised[0], ConfigError), raised
    assert says in str(raised[0]) and "--action-map" in str(raised[0])
