"""Shared output helpers: Rich tables for people, canonical JSON for machines."""

from __future__ import annotations

import sys
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
