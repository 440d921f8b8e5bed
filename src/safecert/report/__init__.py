"""Reports: self-contained ``report.html`` files (images as ``data:`` URIs, nothing fetched, a
print stylesheet) next to every certificate, plus ``safecert diff`` and the ``safecert report``
index. Black-box runs also get ``report.md`` and the ODD PNG maps."""

from __future__ import annotations

import logging
from pathlib import Path

from safecert.report.render import write_report

__all__ = ["render_beside", "write_report", "write_report_beside"]

log = logging.getLogger(__name__)


def render_beside(cert_path: Path) -> str:
    """The HTML report of the shield or BNN certificate at ``cert_path`` (its evidence beside it)."""
    from safecert.certificate import BnnCertificate, ShieldCertificate, read_certificate
    from safecert.errors import DataError

    cert = read_certificate(cert_path)
    if isinstance(cert, ShieldCertificate):
        from safecert.report.shield import render_shield_report

        return render_shield_report(cert, Path(cert_path))
    if isinstance(cert, BnnCertificate):
        from safecert.report.bnn import render_bnn_report

        return render_bnn_report(cert, Path(cert_path))
    raise DataError(
        f"a {cert.kind} report needs its episode store",
        field="certificate.kind",
        fix="black-box reports are written by certify and rejudge",
    )


def write_report_beside(cert_path: Path) -> Path | None:
    """Write ``report.html`` beside a shield or BNN certificate; never raises: the certificate is
    already written and stays valid, so a rendering problem is logged as a warning (with its
    cause) and None is returned."""
    out = Path(cert_path).parent / "report.html"
    try:
        out.write_text(render_beside(cert_path), encoding="utf-8")
    except Exception as exc:  # noqa: BLE001 - a report must never cost the certificate
        log.warning("report.html not written beside %s: %s: %s", cert_path, type(exc).__name__, exc)
        return None
    return out
