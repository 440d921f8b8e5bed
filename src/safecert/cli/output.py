"""Shared output helpers: Rich tables for people, canonical JSON for machines."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

#: ``--sign-key KEY``, shared by every command that writes a certificate
SignKeyOpt = Annotated[
    Path | None,
    typer.Option(
        "--sign-key",
        help="Ed25519 private key (safecert keygen): also write CERT.sig next to the certificate.",
    ),
]

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
    from safecert.document import canonical_json, to_jsonable  # lazy: pydantic is not needed

    sys.stdout.write(canonical_json(to_jsonable(data)))
    sys.stdout.flush()


def table(title: str, columns: list[str], rows: list[list[Any]]) -> Table:
    """A Rich table; floats shown with 5 significant decimals."""
    tab = Table(title=title, title_justify="left")
    for col in columns:
        tab.add_column(col, justify="right" if col not in ("cell", "state", "name") else "left")
    for row in rows:
        tab.add_row(*[f"{v:.5f}" if isinstance(v, float) else str(v) for v in row])
    return tab
