"""``safecert report RUNS_DIR``: a static index page over every certificate in a folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from safecert.cli.output import console, emit_json


def report(
    runs_dir: Annotated[
        Path, typer.Argument(help="Folder searched (recursively) for certificates.")
    ],
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Index page to write (default RUNS_DIR/index.html)."),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the index as JSON.")] = False,
) -> None:
    """Write a static index.html over all certificate.json files under RUNS_DIR: kind, verdict,
    date, signer and links to each certificate and its report. No server is needed; a
    certificate that cannot be read is listed with the reason.

    Example: safecert report runs/
    """
    from safecert.report.index import build_index, write_index

    entries = build_index(runs_dir)
    path = write_index(entries, runs_dir, out)
    if json_out:
        emit_json({"index": str(path), "certificates": [e.to_json() for e in entries]})
    else:
        console.print(f"{len(entries)} certificates indexed: {path}")
