"""Shared output helpers: Rich tables for people, canonical JSON for machines."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from rich.table import Table

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


class _Console:
    """A Rich console made on first use: importing Rich takes about 40 ms, which a command that
    prints no table or styled text (``--json``, a usage error) does not spend."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return getattr(self._console, name)


console: Any = _Console()
err_console: Any = _Console(stderr=True)


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
    """A Rich table; floats shown with 5 significant decimals."""
    from rich.table import Table

    tab = Table(title=title, title_justify="left")
    for col in columns:
        tab.add_column(col, justify="right" if col not in ("cell", "state", "name") else "left")
    for row in rows:
        tab.add_row(*[f"{v:.5f}" if isinstance(v, float) else str(v) for v in row])
    return tab


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
