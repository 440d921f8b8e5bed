"""The certificate: the one artifact every engine writes and ``safecert verify`` reads.

A certificate is a JSON document (ARCHITECTURE.md, "Certificates")::

    {"safecert_version", "kind": "blackbox|shield|bnn", "created_utc", "verdict",
     "parameters": {...}, "inputs": {"config_sha256", ...}, "seed", "result": {...}}

It is written canonically (sorted keys, fixed separators, no NaN), so equal content gives equal
bytes. ``created_utc`` is the wall clock unless ``SOURCE_DATE_EPOCH`` is set (the reproducible-build
convention), in which case two runs with the same seed write identical files.

Engines own the meaning of ``result``; each provides a checker (``safecert.<engine>.verify.check``)
that recomputes what can be recomputed from the evidence. :func:`verify_certificate` dispatches on
``kind``.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import importlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from safecert import __version__
from safecert.errors import DataError

Kind = Literal["blackbox", "shield", "bnn"]
Verdict = Literal["PASS", "FAIL", "INCONCLUSIVE", "SAFE", "UNKNOWN"]

#: kind -> module holding ``check(cert, evidence) -> VerificationReport``; imported lazily so that
#: verifying one kind never needs another engine's dependencies.
CHECKERS: dict[str, str] = {
    "blackbox": "safecert.blackbox.verify",
    "shield": "safecert.shield.verify",
    "bnn": "safecert.bnn.verify",
}


class Certificate(BaseModel):
    """The certificate envelope; ``result`` is engine-specific."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    safecert_version: str
    kind: Kind
    created_utc: str
    verdict: Verdict
    parameters: dict[str, Any]
    inputs: dict[str, str | None]
    seed: int | None
    result: dict[str, Any]


def utc_now() -> str:
    """ISO-8601 UTC timestamp, or ``SOURCE_DATE_EPOCH`` when set (reproducible output)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    moment = (
        _dt.datetime.fromtimestamp(int(epoch), tz=_dt.UTC)
        if epoch
        else _dt.datetime.now(tz=_dt.UTC).replace(microsecond=0)
    )
    return moment.isoformat().replace("+00:00", "Z")


def make_certificate(
    kind: Kind,
    verdict: Verdict,
    *,
    parameters: dict[str, Any],
    inputs: dict[str, str | None],
    seed: int | None,
    result: dict[str, Any],
) -> Certificate:
    """Build a validated certificate stamped with this version and the current time."""
    return Certificate(
        safecert_version=__version__,
        kind=kind,
        created_utc=utc_now(),
        verdict=verdict,
        parameters=to_jsonable(parameters),
        inputs=inputs,
        seed=seed,
        result=to_jsonable(result),
    )


def to_jsonable(obj: Any) -> Any:
    """Convert NumPy scalars/arrays, tuples and paths to plain JSON types; reject NaN/inf."""
    import numpy as np

    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating | float):
        value = float(obj)
        if not math.isfinite(value):
            raise DataError(f"non-finite number {value}", field="certificate")
        return value
    if isinstance(obj, Path):
        return str(obj)
    return obj


def canonical_json(data: Any) -> str:
    """Sorted keys, two-space indent, no NaN: equal content, equal bytes."""
    return (
        json.dumps(to_jsonable(data), sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False)
        + "\n"
    )


def write_certificate(cert: Certificate, path: Path) -> Path:
    """Write ``cert`` canonically (atomically: temp file then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(canonical_json(cert.model_dump(mode="json")), encoding="utf-8")
    tmp.replace(path)
    return path


def read_certificate(path: Path) -> Certificate:
    """Read and validate a certificate; any problem is one :class:`DataError` line."""
    path = Path(path)
    if not path.is_file():
        raise DataError(
            f"{path} does not exist", field="certificate", fix="pass a certificate.json"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(
            f"{path} is not valid JSON ({exc})",
            field="certificate",
            fix="pass the file safecert wrote",
        ) from None
    if not isinstance(data, dict):
        raise DataError(
            f"{path} holds a JSON {type(data).__name__}, not an object", field="certificate"
        )
    try:
        return Certificate.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "certificate"
        raise DataError(
            f"{err['msg']} (got {_short(err.get('input'))})",
            field=f"certificate.{loc}",
            fix="regenerate the certificate with safecert",
        ) from None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def sha256_file(path: Path, chunk_bytes: int = 1 << 20) -> str:
    """Hex SHA-256 of a file, streamed."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as fh:
        while block := fh.read(chunk_bytes):
            digest.update(block)
    return digest.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def content_sha256(cert: Certificate) -> str:
    """SHA-256 of the certificate's content without its timestamp (equal runs, equal digest)."""
    data = cert.model_dump(mode="json")
    data.pop("created_utc")
    return sha256_bytes(canonical_json(data).encode("utf-8"))


@dataclass(frozen=True)
class Check:
    """One recomputed quantity: what was checked, whether it matched, and how."""

    name: str
    ok: bool
    detail: str = ""


@dataclass
class VerificationReport:
    """What ``safecert verify`` found; ``ok`` only when every check matched."""

    kind: str
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    def add(self, name: str, ok: bool, detail: str = "") -> None:
        self.checks.append(Check(name, bool(ok), detail))


@dataclass(frozen=True)
class Evidence:
    """Where the evidence behind a certificate lives (defaults: next to the certificate)."""

    certificate_path: Path
    logs: Path | None = None
    data_dir: Path | None = None


def verify_certificate(cert: Certificate, evidence: Evidence) -> VerificationReport:
    """Dispatch to the engine's checker for ``cert.kind``."""
    module_name = CHECKERS.get(cert.kind)
    if module_name is None:  # pragma: no cover - Literal already restricts kinds
        raise DataError(f"unknown kind {cert.kind!r}", field="certificate.kind")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise DataError(
            f"no checker for kind {cert.kind!r} is installed ({exc.name} missing)",
            field="certificate.kind",
            fix="install safecert[all]",
        ) from None
    report: VerificationReport = module.check(cert, evidence)
    return report
