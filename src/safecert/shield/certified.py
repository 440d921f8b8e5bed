"""A shield ready to enforce: read from a shield certificate's folder and tied to it by digest.

:func:`load_certified_shield` refuses (one line, :class:`DataError`) a certificate that is not a
shield certificate, whose verdict is FAIL, or whose ``model.toml`` or ``shield.json`` beside it
does not hash to the digests the certificate records, or whose ``shield.json`` differs from the
certificate's ``result.allowed``. What it returns is therefore exactly the shield and model the
certificate speaks about; whether the certificate itself re-derives is ``safecert verify``'s job.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from safecert.certificate import ShieldCertificate, read_certificate
from safecert.document import sha256_file
from safecert.errors import DataError
from safecert.shield.model import ShieldModel, load_model


@dataclass(frozen=True)
class CertifiedShield:
    """The certified shield table ``{state label: permitted actions}`` (a live state it does not
    list is halt-only), its model and where it came from."""

    certificate_path: Path
    certificate: ShieldCertificate
    model: ShieldModel
    table: dict[str, frozenset[str]]

    @property
    def halt(self) -> str:
        return self.model.actions[self.model.halt]

    @property
    def horizon(self) -> int:
        return self.model.horizon

    @property
    def initial(self) -> str:
        return self.model.labels[self.model.initial]


def load_certified_shield(path: Path, option: str = "--certificate") -> CertifiedShield:
    """The shield and model of the shield certificate at ``path`` (module docstring)."""
    path = Path(path)
    cert = read_certificate(path)
    if not isinstance(cert, ShieldCertificate):
        raise DataError(f"{path} is a {cert.kind} certificate, not a shield one", field=option)
    if cert.verdict == "FAIL":
        raise DataError(
            f"{path} has verdict FAIL (V̄_T(s0) = {cert.result.bound:.4g} > ε)",
            field=option,
            fix="serve a shield whose certificate is PASS or BOUND",
        )
    found: dict[str, Path] = {}
    for role in ("model-copy", "shield"):
        entries = [e for e in cert.inputs.evidence if e.role == role]
        if len(entries) != 1:
            raise DataError(
                f"the certificate lists {len(entries)} {role} evidence files", field=option
            )
        entry = entries[0]
        file = Path(entry.path) if Path(entry.path).is_absolute() else path.parent / entry.path
        if not file.is_file():
            raise DataError(f"{file} ({role}) does not exist", field=option)
        if sha256_file(file) != entry.sha256:
            raise DataError(
                f"{file} does not match the certificate's {role} digest",
                field=option,
                fix="serve the files the certificate was written with",
            )
        found[role] = file
    model = load_model(found["model-copy"])
    try:
        table = json.loads(found["shield"].read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{found['shield']} is not JSON ({exc})", field=option) from None
    if table != cert.result.allowed:
        raise DataError(
            f"{found['shield']} differs from the certificate's result.allowed", field=option
        )
    from safecert.shield.report import allowed_from_json

    allowed_from_json(model, table, option)  # labels and actions belong to the model
    return CertifiedShield(
        path, cert, model, {state: frozenset(acts) for state, acts in table.items()}
    )
