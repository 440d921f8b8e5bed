"""``safecert verify CERT.json``: validate the certificate and re-derive its claim with its engine."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from safecert.cli.output import as_flags, console, emit_json, table
from safecert.errors import ConfigError

if TYPE_CHECKING:
    from safecert.verification import VerificationReport


def verify(
    certificate: Annotated[Path, typer.Argument(help="certificate.json written by safecert.")],
    logs: Annotated[Path | None, typer.Option(help="Logs behind a shield certificate.")] = None,
    data: Annotated[
        Path | None,
        typer.Option(help="Folder with the run's evidence (default: the certificate's folder)."),
    ] = None,
    inputs: Annotated[
        Path | None,
        typer.Option(
            "--inputs",
            help="Folder holding the input files now (default: inputs.root as recorded); "
            "for checking on another machine.",
        ),
    ] = None,
    pubkey: Annotated[
        Path | None,
        typer.Option(
            help="Ed25519 public key: also require CERT.sig to be a valid signature by it."
        ),
    ] = None,
    resimulate: Annotated[
        int,
        typer.Option(
            help="Black-box only: re-run K stored episodes chosen at random from their seeds "
            "with the recorded policy and environment, and fail when any outcome differs. "
            "This shows the store was produced by this policy and environment for those "
            "episodes; it does not show the vendor behaves the same elsewhere or later.",
        ),
    ] = 0,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Re-derive a certificate's claim from its parameters and evidence; exit 1 on any mismatch.

    Every value in the certificate's result is recomputed and compared; every input file and the
    evidence are re-hashed. Exit 0: verified; 1: a check failed (each named, with both values);
    2: the certificate or an option is malformed.

    Example: safecert verify runs/demo/certificate.json --pubkey keys/safecert_ed25519.pub
    """
    from safecert.api import verify as run_verify

    for option, folder in (("--inputs", inputs), ("--data", data)):
        if folder is not None and not folder.is_dir():
            raise ConfigError(
                f"{folder} is not a folder", field=option, fix="pass an existing folder or omit it"
            )
    if logs is not None and not logs.exists():
        raise ConfigError(f"{logs} does not exist", field="--logs", fix="pass the shield's logs")
    with as_flags("resimulate", "logs", "data"):
        report = run_verify(
            certificate, logs=logs, data=data, inputs=inputs, pubkey=pubkey, resimulate=resimulate
        )
    _print(certificate, report, report.verdict, json_out, pubkey is not None)
    if not report.ok:
        raise typer.Exit(1)


def _print(
    certificate: Path, report: VerificationReport, verdict: str | None, json_out: bool, signed: bool
) -> None:
    if json_out:
        emit_json(
            {
                "kind": report.kind,
                "verdict": verdict,
                "ok": report.ok,
                "signature_checked": signed,
                "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in report.checks],
            }
        )
    else:
        failed = report.failed
        shown = failed if failed else report.checks
        console.print(
            table(
                f"verify {certificate} ({report.kind}): "
                + (
                    f"{len(failed)} of {len(report.checks)} checks FAILED"
                    if failed
                    else f"{len(report.checks)} checks"
                ),
                ["name", "ok", "detail"],
                [[c.name, "yes" if c.ok else "NO", c.detail] for c in shown],
            )
        )
        console.print(
            f"[bold green]VERIFIED[/] {report.kind} {verdict}"
            + (" (signature checked)" if signed else " (signature not checked)")
            if report.ok
            else "[bold red]MISMATCH[/]"
        )
