"""``safecert verify CERT.json``: validate the envelope and re-check it with its engine."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from safecert.certificate import Evidence, read_certificate, verify_certificate
from safecert.cli.output import console, emit_json, table


def verify(
    certificate: Annotated[Path, typer.Argument(help="certificate.json written by safecert.")],
    logs: Annotated[Path | None, typer.Option(help="Logs behind a shield certificate.")] = None,
    data: Annotated[Path | None, typer.Option(help="Folder with the run's evidence.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Independently recompute a certificate from its evidence; exit 1 on any mismatch.

    Example: safecert verify runs/demo/certificate.json
    """
    cert = read_certificate(certificate)
    report = verify_certificate(cert, Evidence(certificate, logs=logs, data_dir=data))
    if json_out:
        emit_json(
            {
                "kind": report.kind,
                "ok": report.ok,
                "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in report.checks],
            }
        )
    else:
        console.print(
            table(
                f"verify {certificate} ({report.kind})",
                ["name", "ok", "detail"],
                [[c.name, "yes" if c.ok else "NO", c.detail] for c in report.checks],
            )
        )
        console.print("[bold green]VERIFIED[/]" if report.ok else "[bold red]MISMATCH[/]")
    if not report.ok:
        raise typer.Exit(1)
