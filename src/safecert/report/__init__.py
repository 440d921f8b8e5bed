"""Reports: self-contained ``report.html`` files (images as ``data:`` URIs, nothing fetched, a
print stylesheet) next to every certificate, plus ``safecert diff`` and the ``safecert report``
index. Black-box runs also get ``report.md`` and the ODD PNG maps."""

from __future__ import annotations

from pathlib import Path

from safecert.report.render import write_report

__all__ = ["render_beside", "write_report", "write_run_report"]


def render_beside(cert_path: Path) -> str:
    """The HTML report of the shield or BNN certificate at ``cert_path`` (its evidence beside it)."""
    from safecert.certificate import read_certificate
    from safecert.errors import DataError

    cert = read_certificate(cert_path)
    if cert.kind == "shield":
        from safecert.report.shield import render_shield_report

        return render_shield_report(cert, Path(cert_path))
    if cert.kind == "bnn":
        from safecert.report.bnn import render_bnn_report

        return render_bnn_report(cert, Path(cert_path))
    raise DataError(
        f"a {cert.kind} report needs its episode store",
        field="certificate.kind",
        fix="black-box reports are written by certify and rejudge",
    )


def write_run_report(cert_path: Path) -> Path:
    """Write the report of the run whose certificate is at ``cert_path``, beside it, and return
    the ``report.html`` path: black-box and sequential runs from their episode store (also
    ``report.md``, the ODD maps and the replayed trajectories), shield and BNN runs from the
    evidence beside the certificate.

    This is the callers' step (the CLI, :mod:`safecert.api`): engines return certificates and
    never import this package. A rendering error propagates — the certificate is already written
    and stays valid; the caller says so."""
    from safecert.certificate import BlackboxCertificate, SequentialCertificate, read_certificate

    cert_path = Path(cert_path)
    cert = read_certificate(cert_path)
    out = cert_path.parent / "report.html"
    if isinstance(cert, BlackboxCertificate | SequentialCertificate):
        from safecert.audit import Evidence, locate_evidence
        from safecert.blackbox.store import EpisodeStore

        entry = next(e for e in cert.inputs.evidence if e.role == "episodes")
        with EpisodeStore(locate_evidence(entry, Evidence(cert_path)), create=False) as store:
            records = store.records()
            config_path = store.get_meta("config_path")
        write_report(
            cert, records, cert_path.parent, config_path=Path(config_path) if config_path else None
        )
        return out
    out.write_text(render_beside(cert_path), encoding="utf-8")
    return out
