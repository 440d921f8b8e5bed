"""The text tables and lines of the commands: drawn as Rich drew them (checked against Rich
itself), styled only on a terminal, never wrapped."""

from __future__ import annotations

import io
import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from safecert.cli.output import Console, table


def _rich(title: str, columns: list[str], rows: list[list[object]]) -> str:
    """The same table through Rich (what the commands printed before), on a wide console."""
    from rich.console import Console as RichConsole
    from rich.table import Table

    tab = Table(title=title, title_justify="left")
    for col in columns:
        tab.add_column(col, justify="right" if col not in ("cell", "state", "name") else "left")
    for row in rows:
        tab.add_row(*[f"{v:.5f}" if isinstance(v, float) else str(v) for v in row])
    out = RichConsole(width=400, record=True, file=io.StringIO())
    out.print(tab)
    return out.export_text()


def _ours(title: str, columns: list[str], rows: list[list[object]]) -> str:
    stream = io.StringIO()
    Console(file=stream).print(table(title, columns, rows))
    return stream.getvalue()


#: characters and one base + combining mark ("V̄", as in the shield table's header)
WORD = st.lists(
    st.sampled_from([*"abcxyz0123456789.-_:()'δε中é", "V\u0304"]), min_size=1, max_size=12
).map("".join)
VALUE = st.one_of(
    st.integers(-(10**6), 10**9),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.lists(WORD, min_size=1, max_size=4).map(" ".join),
    st.lists(WORD, min_size=2, max_size=3).map("\n".join),
    st.just(""),
)


@settings(max_examples=150, deadline=None)
@given(
    title=st.lists(WORD, min_size=1, max_size=16).map(" ".join),
    columns=st.lists(
        st.one_of(st.sampled_from(["cell", "state", "name", "", "N", "upper_bound"]), WORD),
        min_size=1,
        max_size=6,
    ),
    data=st.data(),
)
def test_a_table_is_drawn_as_rich_drew_it(title, columns, data):
    rows = data.draw(
        st.lists(st.lists(VALUE, min_size=len(columns), max_size=len(columns)), max_size=5)
    )
    # Rich read ":name:" as an emoji code (and "[...]" as markup, absent here); we print text
    assume(not re.search(r":\w+:", "\n".join([title, *columns, *map(str, sum(rows, []))])))
    assert _ours(title, columns, rows) == _rich(title, columns, rows)


def test_the_bound_table_is_rich_s_to_the_byte():
    columns = ["failures", "episodes", "rate", "lower_bound", "upper_bound"]
    rows = [[81, 10000, 0.0081, 0.00619, 0.0104]]
    title = "Clopper–Pearson bounds, confidence 0.9 over 9 cell(s) (δ' = 0.0111111 per side)"
    text = _ours(title, columns, rows)
    assert text == _rich(title, columns, rows)
    assert text.splitlines()[0].endswith("(δ' =  ")  # the title wrapped to the table's width


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("stream", [io.StringIO, _Terminal])
def test_markup_is_a_style_on_a_terminal_and_nothing_elsewhere(stream):
    out = stream()
    console = Console(file=out)
    console.print("[bold green]PASS[/] after [0.1, 0.2]")
    console.print("[bold red]kept[/]", markup=False)
    console.print("x" * 300)  # never wrapped
    lines = out.getvalue().splitlines()
    if stream is _Terminal:
        assert lines[0] == "\x1b[1;32mPASS\x1b[0m after [0.1, 0.2]"
    else:
        assert lines[0] == "PASS after [0.1, 0.2]"
    assert lines[1:] == ["[bold red]kept[/]", "x" * 300]


def test_a_table_on_a_terminal_has_a_bold_header_and_the_same_cells():
    out = _Terminal()
    Console(file=out).print(table("t", ["name", "n"], [["a", 1]]))
    styled = out.getvalue()
    assert "\x1b[1m" in styled
    plain = styled.replace("\x1b[1m", "").replace("\x1b[3m", "").replace("\x1b[0m", "")
    assert plain == _ours("t", ["name", "n"], [["a", 1]])


def test_a_table_wider_than_the_terminal_is_fitted_and_loses_no_character(monkeypatch):
    """On a terminal the widest columns are narrowed and their text wrapped, never cut: every
    line fits and each cell's characters are all still there, in order."""
    from safecert.cli import output

    monkeypatch.setattr(output, "_columns", lambda stream: 40)
    detail = "'b7ddbb864ae0a83ab1190fdcf11ee8ff4868bca936be796fe' (config.toml)"
    rows = [["config sha256 (examples/vendors/cheetah.toml)", "yes", detail], ["seed", "yes", "0"]]
    out = _Terminal()
    Console(file=out).print(
        table("verify runs/one/certificate.json: 2 checks", ["name", "ok", "detail"], rows)
    )
    plain = re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue())
    lines = plain.splitlines()
    assert max(map(len, lines)) <= 40 and len(lines) > 8
    body = [line.split("│") for line in lines if line.startswith("│")]
    for column, text in ((1, rows[0][0]), (3, detail)):
        shown = "".join(cells[column].strip() for cells in body[:-1])
        assert shown.replace(" ", "") == text.replace(" ", "")
    assert _ours("t", ["name"], [["x" * 100]]).count("\n") == 6  # not a terminal: 1 line a row


def test_a_fitted_table_never_cuts_a_number_or_a_word(monkeypatch):
    """Fitting narrows only down to a column's longest token of up to 24 cells: numbers and words
    stay whole (on more lines if need be); a longer token (a digest) is the one that is cut."""
    from safecert.cli import output

    monkeypatch.setattr(output, "_columns", lambda stream: 40)
    rows = [["0.0123456789", "upper bound on the failure rate", "9" * 40]]
    out = _Terminal()
    Console(file=out).print(table("t", ["value", "meaning", "digest"], rows))
    plain = re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue())
    body = [line.split("│") for line in plain.splitlines() if line.startswith("│")]
    assert "0.0123456789" in [cells[1].strip() for cells in body]
    words = [w for cells in body for w in cells[2].split()]
    assert words == rows[0][1].split() and max(map(len, plain.splitlines())) <= 40
    digest = "".join(cells[3].strip() for cells in body)
    assert digest == "9" * 40 and all(len(cells[3].strip()) < 40 for cells in body)
