"""``safecert verify CERT.json``: validate the certificate and re-derive its claim with its engine."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from safecert.cli.output import JunitOpt, as_flags, console, emit_json, table
from safecert.errors import ConfigError

if TYPE_CHECKING:
    from safecert.verification import VerificationReport

#: the verdicts each certificate kind can state (docs/architecture.md, "Certificates")
VERDICTS: dict[str, tuple[str, ...]] = {
    "blackbox": ("PASS", "FAIL"),
    "sequential": ("PASS", "FAIL", "INCONCLUSIVE"),
    "shield": ("PASS", "FAIL", "BOUND"),
    "bnn": ("SAFE", "UNKNOWN"),
}
ALL_VERDICTS = tuple(dict.fromkeys(v for vs in VERDICTS.values() for v in vs))


def parse_required(text: str | None) -> tuple[str, ...] | None:
    """``--require PASS,BOUND`` → ("PASS", "BOUND"); an unknown verdict is one line (exit 2)."""
    if text is None:
        return None
    wanted = tuple(dict.fromkeys(w.strip().upper() for w in text.split(",") if w.strip()))
    unknown = [w for w in wanted if w not in ALL_VERDICTS]
    if not wanted or unknown:
        raise ConfigError(
            f"{', '.join(unknown) or repr(text)} is not a verdict",
            field="--require",
            fix=f"one or more of {', '.join(ALL_VERDICTS)}, separated by commas",
        )
    return wanted


def _check_fits(kind: str, required: tuple[str, ...]) -> None:
    """A verdict that a kind never states is a mistake in the gate, not a failed check."""
    stated = VERDICTS.get(kind)
    if stated is None:  # e.g. "signature": the report ends before the certificate is read
        return
    foreign = [w for w in required if w not in stated]
    if foreign:
        raise ConfigError(
            f"a {kind} certificate's verdict is never {', '.join(foreign)}",
            field="--require",
            fix=f"a {kind} verdict is one of {', '.join(stated)}",
        )


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
    require: Annotated[
        str | None,
        typer.Option(
            "--require",
            help="Also require the certificate's verdict to be one of these (comma-separated: "
            "PASS, FAIL, BOUND, SAFE, UNKNOWN, INCONCLUSIVE as fit its kind); exit 1 otherwise. "
            "For a CI gate: --require PASS.",
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    junit: JunitOpt = None,
) -> None:
    """Re-derive a certificate's claim from its parameters and evidence; exit 1 on any mismatch.

    Every value in the certificate's result is recomputed and compared; every input file and the
    evidence are re-hashed. Exit 0: verified (and, with --require, its verdict is one of those);
    1: a check failed (each named, with both values) or the verdict is not required; 2: the
    certificate or an option is malformed. Verified only means the certificate is what it says:
    a verified FAIL is still a FAIL, so a CI gate passes --require PASS.

    Example: safecert verify runs/demo/certificate.json --require PASS --junit verify.xml
    """
    from safecert.api import verify as run_verify

    required = parse_required(require)

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
    if required is not None:
        _check_fits(report.kind, required)
    met = None if required is None else report.ok and report.verdict in required
    _junit(junit, certificate, report, required)
    _print(certificate, report, report.verdict, json_out, pubkey is not None, required, met)
    if not report.ok or met is False:
        raise typer.Exit(1)


def _junit(
    path: Path | None,
    certificate: Path,
    report: VerificationReport,
    required: tuple[str, ...] | None,
) -> None:
    if path is None:
        return
    from safecert.report.junit import Case, verification_cases, write_junit

    cases = verification_cases(report)
    if required is not None:
        met = report.verdict in required
        cases.append(
            Case(
                "required verdict",
                f"safecert.verify.{report.kind}",
                {"verdict": report.verdict, "required": ",".join(required)},
                None if met else f"verdict {report.verdict}, required {' or '.join(required)}",
                "VERDICT",
            )
        )
    props = {
        "kind": report.kind,
        "verdict": report.verdict if report.ok else "not verified",
        "claimed_verdict": report.verdict,
        "ok": report.ok,
    }
    write_junit(path, f"safecert verify {certificate}", cases, props)


def _print(
    certificate: Path,
    report: VerificationReport,
    verdict: str | None,
    json_out: bool,
    signed: bool,
    required: tuple[str, ...] | None,
    met: bool | None,
) -> None:
    if json_out:
        emit_json(
            {
                "kind": report.kind,
                # only a verified verdict is stated as the verdict; a forged one is shown as claimed
                "verdict": verdict if report.ok else None,
                "claimed_verdict": verdict,
                "recomputed_verdict": report.recomputed_verdict,
                "ok": report.ok,
                "signature_checked": signed,
                "required": None if required is None else list(required),
                "required_met": met,
                "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in report.checks],
            }
        )
        return
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
    if met is False:
        console.print(
            f"[bold red]REQUIRED VERDICT NOT MET[/]: the certificate's verdict is {verdict}, "
            f"required {' or '.join(required or ())}"
        )
