"""Shared output helpers: text tables for people, canonical JSON for machines."""

from __future__ import annotations

import io
import os
import re
import sys
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TextIO

import typer

#: ``--sign-key KEY``, shared by every command that writes a certificate
SignKeyOpt = Annotated[
    Path | None,
    typer.Option(
        "--sign-key",
        help="Ed25519 private key (safecert keygen): also write CERT.sig next to the certificate.",
    ),
]

#: ``--junit FILE``, shared by every command that judges something
JunitOpt = Annotated[
    Path | None,
    typer.Option(
        "--junit",
        help="Also write the result as JUnit XML (one test case per cell, check or ε attempt) "
        "for a CI server.",
    ),
]

#: ``--events FILE``, shared by the long-running commands
EventsOpt = Annotated[
    Path | None,
    typer.Option(
        "--events",
        help="Write progress events as JSON lines (run started, batches stored, cells decided, "
        "run finished; docs/blackbox.md) to FILE while the run goes.",
    ),
]


#: the markup the commands write: ``[bold]``, ``[bold green]``, … and ``[/]`` (closes all)
_MARKUP = re.compile(r"\[(/|(?:bold|italic|green|red|yellow)(?: (?:bold|green|red|yellow))*)\]")
_ANSI = {"bold": "1", "italic": "3", "green": "32", "red": "31", "yellow": "33"}


class Console:
    """Plain text on stdout (``stderr``: on stderr): tables and lines, styled with ANSI codes
    only when the stream is a terminal. Importing Rich, which this replaced, took about 40 ms
    and rendering a table 15 ms more — a quarter of ``safecert bound``'s start-up.

    A line is printed as it is, never wrapped (a CI log or a pipe gets each line whole; a table
    is fitted to a terminal's width, :meth:`Table.render`); :meth:`print` turns the tags of :data:`_MARKUP` into styles (``markup=False``
    prints the text as it is, brackets and all). ``file``: another stream (tests)."""

    def __init__(self, *, stderr: bool = False, file: TextIO | None = None) -> None:
        self._stderr = stderr
        self._file = file

    @property
    def file(self) -> TextIO:
        if self._file is not None:
            return self._file
        return sys.stderr if self._stderr else sys.stdout

    def print(self, text: object = "", *, markup: bool = True, highlight: bool = False) -> None:
        """Print ``text`` (a :class:`Table` or a string) and a newline; ``highlight`` is
        accepted for the commands' sake and ignored (no number colouring)."""
        del highlight
        styled = _isatty(self.file)
        if isinstance(text, Table):
            shown = text.render(styled=styled, width=_columns(self.file) if styled else None)
        elif markup:
            shown = _MARKUP.sub(lambda m: _style(m.group(1)) if styled else "", str(text))
        else:
            shown = str(text)
        self.file.write(shown + "\n")
        self.file.flush()

    def status(self, text: str) -> Any:
        """A spinner with ``text`` (Rich's, imported now: long interactive runs only)."""
        from rich.console import Console as RichConsole

        return RichConsole(stderr=self._stderr, file=self._file).status(text)


def _isatty(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _columns(stream: TextIO) -> int:
    """The terminal's width in cells: ``COLUMNS`` when set, else the terminal's own, else 80."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        return os.get_terminal_size(stream.fileno()).columns or 80
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return 80


def _style(tag: str) -> str:
    if tag == "/":
        return "\x1b[0m"
    return "\x1b[" + ";".join(_ANSI[word] for word in tag.split()) + "m"


console = Console()
err_console = Console(stderr=True)


@contextmanager
def as_flags(*parameters: str) -> Iterator[None]:
    """Name these parameters as the command's flags in an error from the layer below: the API
    and the engines say ``p_star: …``, the command line ``--p-star: …``."""
    from safecert.errors import SafecertError

    try:
        yield
    except SafecertError as exc:
        if exc.field not in parameters:
            raise
        flag = "--" + exc.field.replace("_", "-")
        text = str(exc).removeprefix(f"{exc.field}: ")
        raise type(exc)(text, field=flag) from None


def emit_json(data: Any) -> None:
    """Print ``data`` as canonical JSON on stdout (nothing else goes to stdout with --json)."""
    from safecert.canonical import canonical_json, to_jsonable

    sys.stdout.write(canonical_json(to_jsonable(data)))
    sys.stdout.flush()


def table(title: str, columns: list[str], rows: list[list[Any]]) -> Table:
    """A table; floats shown with 5 significant decimals."""
    return Table(
        title,
        [(col, col not in ("cell", "state", "name")) for col in columns],
        [[f"{v:.5f}" if isinstance(v, float) else str(v) for v in row] for row in rows],
    )


class Table:
    """A boxed text table, drawn as Rich drew ``Table(title=…, title_justify="left")`` with its
    default box when it fits the terminal: the title word-wrapped to the table's width above a
    heavy-ruled header, one line per row (a cell's own lines stacked), right-justified columns
    as asked. Widths count terminal cells (a wide character 2, a combining mark 0).

    :meth:`render` with a ``width`` (a terminal's) narrows the widest columns until the table
    fits and wraps their text onto more lines — every character is still shown, none is cut to
    an ellipsis, and no number or word of up to :data:`_WHOLE` cells is cut across lines (a
    column is never narrowed below its longest such token; only longer tokens, such as digests,
    are cut); without one (a pipe, a CI log) the table is drawn at its natural width."""

    def __init__(self, title: str, columns: list[tuple[str, bool]], rows: list[list[str]]) -> None:
        self.title = title
        self.columns = columns  #: (header, right-justified)
        self.rows = rows

    def render(self, *, styled: bool = False, width: int | None = None) -> str:
        heads = [[h] for h, _ in self.columns]
        right = [r for _, r in self.columns]
        cells = [[cell.split("\n") for cell in row] for row in self.rows]
        widths = [
            max([_width(head[0]), *(_width(line) for row in cells for line in row[i])])
            for i, head in enumerate(heads)
        ]
        if width is not None and sum(widths) + 3 * len(widths) + 1 > width:
            floors = [
                max([_MIN_COLUMN, _longest_whole(head[0])]
                    + [_longest_whole(line) for row in cells for line in row[i]])
                for i, head in enumerate(heads)
            ]  # fmt: skip
            widths = _narrowed(widths, width - 3 * len(widths) - 1, floors)
            heads = [_folded(head, w) for head, w in zip(heads, widths, strict=True)]
            cells = [[_folded(c, w) for c, w in zip(row, widths, strict=True)] for row in cells]
        bold, italic, plain = ("\x1b[1m", "\x1b[3m", "\x1b[0m") if styled else ("", "", "")

        def block(row: list[list[str]], bar: str, style: str = "") -> list[str]:
            lines = []
            for k in range(max(len(c) for c in row)):
                texts = [c[k] if k < len(c) else "" for c in row]
                padded = [
                    " " * (w - _width(t)) + t if r else t + " " * (w - _width(t))
                    for t, w, r in zip(texts, widths, right, strict=True)
                ]
                end = plain if style else ""
                lines.append(bar + bar.join(f" {style}{p}{end} " for p in padded) + bar)
            return lines

        def rule(left: str, fill: str, mid: str, end: str) -> str:
            return left + mid.join(fill * (w + 2) for w in widths) + end

        total = sum(widths) + 3 * len(widths) + 1
        out = [italic + t + " " * (total - _width(t)) + plain for t in _wrap(self.title, total)]
        out.append(rule("┏", "━", "┳", "┓"))
        out += block(heads, "┃", bold)
        out.append(rule("┡", "━", "╇", "┩"))
        for row in cells:
            out += block(row, "│")
        out.append(rule("└", "─", "┴", "┘"))
        return "\n".join(out)


#: the narrowest a column is made to fit a terminal
_MIN_COLUMN = 4
#: a token (number, word) up to this many cells is never cut across lines; a longer one (a
#: digest, a path) may be, anywhere — the rule of the HTML and PDF reports
_WHOLE = 24


def _longest_whole(text: str) -> int:
    """The widest whitespace-separated token of ``text`` that must stay whole (≤ :data:`_WHOLE`)."""
    return max((w for w in map(_width, text.split()) if w <= _WHOLE), default=0)


def _narrowed(widths: list[int], room: int, floors: list[int]) -> list[int]:
    """``widths`` with the widest column narrowed by one cell at a time until they sum to at
    most ``room``, no column below its floor (then the table stays wider than ``room``)."""
    widths = list(widths)
    while sum(widths) > room:
        narrowable = [i for i in range(len(widths)) if widths[i] > floors[i]]
        if not narrowable:
            break
        widths[max(narrowable, key=lambda i: widths[i])] -= 1
    return widths


def _folded(lines: list[str], width: int) -> list[str]:
    """Each of ``lines`` word-wrapped to ``width`` cells (a longer word cut across lines)."""
    return [piece.rstrip() for line in lines for piece in _wrap(line, width)]


def _width(text: str) -> int:
    """Terminal cells of ``text``: 2 for a wide character, 0 for a combining mark."""
    if text.isascii():
        return len(text)
    return sum(
        0 if unicodedata.combining(ch) else 2 if unicodedata.east_asian_width(ch) in "WF" else 1
        for ch in text
    )


def _chop(word: str, width: int) -> list[str]:
    """``word`` cut into pieces of at most ``width`` cells (a combining mark stays with its
    character)."""
    pieces, used, begin = [], 0, 0
    for i, ch in enumerate(word):
        size = _width(ch)
        if used + size > width:
            pieces.append(word[begin:i])
            begin, used = i, 0
        used += size
    if used:
        pieces.append(word[begin:])
    return pieces


def _wrap(text: str, width: int) -> list[str]:
    """Word wrap to ``width`` cells as Rich wraps a title: greedy, a word keeps the spaces after
    it, a word wider than a line is cut across lines."""
    lines: list[str] = []
    for part in text.split("\n"):
        breaks: list[int] = []
        used = 0
        for match in re.finditer(r"\s*\S+\s*", part):
            start, word = match.start(), match.group()
            size = _width(word.rstrip())
            if width - used >= size:
                used += _width(word)
            elif size > width:
                pieces = _chop(word, width)
                for k, piece in enumerate(pieces):
                    if start:
                        breaks.append(start)
                    if k == len(pieces) - 1:
                        used = _width(piece)
                    else:
                        start += len(piece)
            elif used and start:
                breaks.append(start)
                used = _width(word)
        for a, b in zip([0, *breaks], [*breaks, len(part)], strict=True):
            line = part[a:b]
            lines.append(line[: _fits(line, width)])
    return lines


def _fits(text: str, width: int) -> int:
    """How many characters of ``text`` fill at most ``width`` cells."""
    used = 0
    for i, ch in enumerate(text):
        used += _width(ch)
        if used > width:
            return i
    return len(text)


@contextmanager
def command_events(
    events_file: Path | None, terminal: Callable[[], Any] | None, *, quiet: bool
) -> Iterator[Any]:
    """The progress events of one command: ``terminal()``'s live view when stderr is a terminal
    (none with ``quiet``, i.e. --json), plain progress lines every ~10 s when it is not (a CI log;
    stdout stays clean), and JSON lines into ``events_file`` when given."""
    from safecert.events import Events, JsonLines, ProgressLines

    events = Events()
    if sys.stderr.isatty():
        if terminal is not None and not quiet:
            events.subscribe(terminal())
    else:
        events.subscribe(ProgressLines())
    if events_file is not None:
        events.subscribe(JsonLines(events_file))
    try:
        yield events
    finally:
        events.close()


def write_junit_for(path: Path | None, name: str, cert: Any, command: str) -> None:
    """``--junit FILE``: the certificate's test cases (:mod:`safecert.report.junit`)."""
    if path is None:
        return
    from safecert.report.junit import certificate_cases, certificate_properties, write_junit

    write_junit(path, name, certificate_cases(cert, command), certificate_properties(cert))
