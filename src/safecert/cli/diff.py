"""``safecert diff A B``: what changed between two certificates (text, ``--json``, ``--html``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from safecert.cli.output import emit_json


def diff(
    a: Annotated[Path, typer.Argument(help="The earlier certificate.json (A).")],
    b: Annotated[Path, typer.Argument(help="The later certificate.json (B).")],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    html: Annotated[
        Path | None, typer.Option("--html", help="Also write the diff as an HTML page here.")
    ] = None,
) -> int:
    """Show what changed from certificate A to certificate B: verdict, per-cell rates and bounds,
    ODD cells gained and lost, parameters and digests. Exit 0: identical; 1: they differ (as
    diff(1)); 2: a certificate is malformed.

    Example: safecert diff runs/cheetah_safe/certificate.json runs/cheetah_fast/certificate.json
    """
    from safecert.certificate import read_certificate
    from safecert.report.diff import diff_certificates, diff_text, write_diff_html

    result = diff_certificates(read_certificate(a), read_certificate(b), str(a), str(b))
    if html is not None:
        write_diff_html(result, html)
    if json_out:
        emit_json(result.to_json())
    else:
        sys.stdout.write(diff_text(result))
        if html is not None:
            sys.stdout.write(f"html: {html}\n")
    return 0 if result.identical else 1
