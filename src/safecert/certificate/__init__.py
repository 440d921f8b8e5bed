"""The certificate: the one artifact every engine writes and ``safecert verify`` reads.

A certificate is a canonical JSON document (sorted keys, fixed separators, no NaN)::

    {"safecert_version", "kind", "created_utc", "verdict", "parameters", "inputs", "seed", "result"}

``kind`` selects the shape of ``result`` (a strict pydantic model per kind: a discriminated union)
and the verdict vocabulary:

=============  =====================  ==========================================================
kind           verdicts               what the verdict claims
=============  =====================  ==========================================================
``blackbox``   PASS, FAIL             PASS: with confidence ``spec.confidence``, every cell of the
                                      family (stage 1 and the grid) fails at most ``p*``; FAIL:
                                      some cell could not be shown to.
``sequential`` PASS, FAIL,            as ``blackbox``, with anytime-valid per-cell tests; FAIL:
               INCONCLUSIVE           some cell was shown to fail more than ``p*``;
                                      INCONCLUSIVE: no FAIL, but some cell reached its cap undecided.
``shield``     PASS, FAIL, BOUND      PASS/FAIL: the certified bound V̄_T(s0) is ≤ / > the stated
                                      ε; BOUND: no ε was stated, the bound is reported, nothing
                                      is claimed about it.
``bnn``        SAFE, UNKNOWN          SAFE: all three invariant conditions were proved for every
                                      weight in the box; UNKNOWN: nothing is claimed.
=============  =====================  ==========================================================

``created_utc`` is the wall clock unless ``SOURCE_DATE_EPOCH`` is set (the reproducible-build
convention), in which case two runs with the same seed write identical files.

Each engine has one module that builds its certificate (``safecert.<engine>.certify``) and one
checker (``safecert.<engine>.check``) that re-derives the claim from ``parameters`` and the
evidence; :func:`verify_certificate` dispatches on ``kind``.

Each kind's model lives in a module of its own (:data:`MODELS`), imported when a certificate of
that kind is made or read, or when its class is named (``from safecert.certificate import
ShieldCertificate``): a black-box run never builds the shield or BNN result models. To a type
checker :data:`Certificate` is the union of the kinds (discriminated by ``kind``); at run time it
is their common base class, :class:`Envelope`, which every parsed certificate is an instance of.
"""

from __future__ import annotations

import datetime as _dt
import importlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from pydantic import ValidationError

from safecert import __version__
from safecert.canonical import canonical_json, to_jsonable
from safecert.document import (
    MAX_BYTES,
    FileDigest,
    Inputs,
    StrictModel,
    durable_write,
    sha256_bytes,
    sha256_file,
)
from safecert.errors import DataError
from safecert.verification import short_repr

if TYPE_CHECKING:
    from typing import Annotated, TypeAlias

    from pydantic import Field

    from safecert.certificate.blackbox import BlackboxCertificate, SequentialCertificate
    from safecert.certificate.bnn import BnnCertificate
    from safecert.certificate.shield import ShieldCertificate

__all__ = [
    "BlackboxCertificate",
    "BnnCertificate",
    "Certificate",
    "Envelope",
    "FileDigest",
    "MODELS",
    "Inputs",
    "SequentialCertificate",
    "ShieldCertificate",
    "canonical_json",
    "certificate_bytes",
    "content_sha256",
    "make_certificate",
    "model_of",
    "read_certificate",
    "read_certificate_bytes",
    "sha256_bytes",
    "sha256_file",
    "to_jsonable",
    "write_certificate",
]

Kind = Literal["blackbox", "sequential", "shield", "bnn"]
KINDS = ("blackbox", "sequential", "shield", "bnn")


#: a parsed certificate is never nested deeper than this; deeper JSON is refused before parsing
MAX_DEPTH = 64


class Envelope(StrictModel):
    """The fields every kind shares; each kind's model adds ``kind``, ``verdict`` and ``result``."""

    safecert_version: str
    created_utc: str
    parameters: dict[str, Any]
    inputs: Inputs
    seed: int | None


#: kind -> (module, class) of its certificate model, imported on first use
MODELS: dict[str, tuple[str, str]] = {
    "blackbox": ("safecert.certificate.blackbox", "BlackboxCertificate"),
    "sequential": ("safecert.certificate.blackbox", "SequentialCertificate"),
    "shield": ("safecert.certificate.shield", "ShieldCertificate"),
    "bnn": ("safecert.certificate.bnn", "BnnCertificate"),
}

if TYPE_CHECKING:
    Certificate: TypeAlias = Annotated[
        BlackboxCertificate | SequentialCertificate | ShieldCertificate | BnnCertificate,
        Field(discriminator="kind"),
    ]
else:
    Certificate = Envelope


def model_of(kind: str) -> type[Envelope]:
    """The certificate model of ``kind`` (one of :data:`KINDS`), its module imported now."""
    module, name = MODELS[kind]
    model: type[Envelope] = getattr(importlib.import_module(module), name)
    return model


def __getattr__(name: str) -> Any:
    """``from safecert.certificate import ShieldCertificate``: the kind's module, imported now."""
    for module, model in MODELS.values():
        if model == name:
            value = getattr(importlib.import_module(module), name)
            globals()[name] = value
            return value
    raise AttributeError(f"module 'safecert.certificate' has no attribute {name!r}")


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
    verdict: str,
    *,
    parameters: dict[str, Any],
    inputs: Inputs,
    seed: int | None,
    result: StrictModel,
) -> Certificate:
    """Build a validated certificate stamped with this version and the current time."""
    return parse_certificate(
        {
            "safecert_version": __version__,
            "kind": kind,
            "created_utc": utc_now(),
            "verdict": verdict,
            "parameters": to_jsonable(parameters),
            "inputs": inputs.model_dump(mode="json"),
            "seed": seed,
            "result": to_jsonable(result),
        },
        source="certificate",
    )


def parse_certificate(data: Any, *, source: str) -> Certificate:
    """Validate a JSON value as a certificate; the first problem is one DataError naming its field."""
    if not isinstance(data, dict):
        raise DataError(
            f"{source} holds a JSON {type(data).__name__}, not an object", field="certificate"
        )
    if "kind" not in data:
        raise DataError(
            f"Unable to extract tag using discriminator 'kind' (got {short_repr(data)})",
            field="certificate",
            fix="regenerate the certificate with safecert",
        )
    kind = data["kind"]
    if not isinstance(kind, str) or kind not in MODELS:
        tags = ", ".join(f"'{k}'" for k in KINDS)
        raise DataError(
            f"Input tag '{kind}' found using 'kind' does not match any of the expected tags: "
            f"{tags} (got {short_repr(data)})",
            field="certificate",
            fix="regenerate the certificate with safecert",
        )
    try:
        return cast("Certificate", model_of(kind).model_validate(data))
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(["certificate", *(str(p) for p in err["loc"])])
        if err["type"] == "missing":
            raise DataError(
                "is missing", field=where, fix="a certificate has no optional fields"
            ) from None
        if err["type"] == "extra_forbidden":
            raise DataError("is not a certificate field", field=where, fix="remove it") from None
        raise DataError(
            f"{err['msg']} (got {short_repr(err.get('input'))})",
            field=where,
            fix="regenerate the certificate with safecert",
        ) from None


def certificate_bytes(cert: Certificate) -> bytes:
    """The canonical bytes of ``cert`` (what is written, hashed and signed)."""
    return canonical_json(cert.model_dump(mode="json")).encode("utf-8")


def write_certificate(cert: Certificate, path: Path, *, sign_key: Path | None = None) -> Path:
    """Write ``cert`` canonically and durably; with ``sign_key`` also ``PATH.sig`` (Ed25519).

    Without a key, a ``PATH.sig`` left by an earlier run is removed: it signs other bytes.
    """
    path = Path(path)
    if sign_key is not None:
        from safecert.signing import load_private_key

        load_private_key(sign_key)  # a bad key is one line before anything is written
    Path(f"{path}.sig").unlink(missing_ok=True)
    path = durable_write(path, certificate_bytes(cert))
    if sign_key is not None:
        from safecert.signing import sign_file

        sign_file(path, sign_key)
    return path


def read_certificate_bytes(path: Path) -> bytes:
    """The bytes of a certificate file (size-limited); any problem is one :class:`DataError`.

    Read once and hand the same bytes to the signature check and to :func:`read_certificate`,
    so that a file swapped between the two reads cannot pass one and be parsed by the other."""
    path = Path(path)
    if path.is_dir() and (path / "certificate.json").is_file():
        raise DataError(
            f"{path} is a folder", field="certificate", fix=f"pass {path / 'certificate.json'}"
        )
    if not path.is_file():
        what = "is not a regular file" if path.exists() else "does not exist"
        raise DataError(f"{path} {what}", field="certificate", fix="pass a certificate.json")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DataError(f"{path} cannot be read ({exc.strerror})", field="certificate") from None
    if len(raw) > MAX_BYTES:
        raise DataError(f"{path} is larger than {MAX_BYTES >> 20} MiB", field="certificate")
    return raw


def read_certificate(path: Path, raw: bytes | None = None) -> Certificate:
    """Read and validate a certificate (from ``raw`` when given, the bytes already read from
    ``path``); any problem is one :class:`DataError` line."""
    path = Path(path)
    if raw is None:
        raw = read_certificate_bytes(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(
            f"{path} is not UTF-8 text (byte {exc.start})",
            field="certificate",
            fix="pass the file safecert wrote",
        ) from None
    depth = _max_depth(text)
    if depth > MAX_DEPTH:
        raise DataError(
            f"{path} nests {depth} levels deep (a certificate nests at most {MAX_DEPTH})",
            field="certificate",
        )
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError, ValueError) as exc:
        raise DataError(
            f"{path} is not valid JSON ({exc})",
            field="certificate",
            fix="pass the file safecert wrote",
        ) from None
    return parse_certificate(data, source=str(path))


def _max_depth(text: str) -> int:
    """Deepest bracket nesting of a JSON text (outside strings), without recursion."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def content_sha256(cert: Certificate) -> str:
    """SHA-256 of the certificate's content without its timestamp (equal runs, equal digest)."""
    data = cert.model_dump(mode="json")
    data.pop("created_utc")
    return sha256_bytes(canonical_json(data).encode("utf-8"))
