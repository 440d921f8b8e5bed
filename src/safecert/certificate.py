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
"""

from __future__ import annotations

import datetime as _dt
import importlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter, ValidationError

from safecert import __version__
from safecert.blackbox.result import BlackboxResult, SequentialResult
from safecert.bnn.result import BnnResult
from safecert.document import (
    FileDigest,
    Inputs,
    StrictModel,
    canonical_json,
    durable_write,
    sha256_bytes,
    sha256_file,
    to_jsonable,
)
from safecert.errors import DataError, SafecertError
from safecert.shield.result import ShieldResult

__all__ = [
    "BlackboxCertificate",
    "BnnCertificate",
    "Certificate",
    "Check",
    "Evidence",
    "FileDigest",
    "Inputs",
    "SequentialCertificate",
    "ShieldCertificate",
    "VerificationReport",
    "canonical_json",
    "certificate_bytes",
    "content_sha256",
    "make_certificate",
    "read_certificate",
    "read_certificate_bytes",
    "sha256_bytes",
    "sha256_file",
    "to_jsonable",
    "verify_certificate",
    "write_certificate",
]

Kind = Literal["blackbox", "sequential", "shield", "bnn"]

#: kind -> module holding ``check(cert, evidence) -> VerificationReport``; imported lazily so that
#: verifying one kind never needs another engine's dependencies.
CHECKERS: dict[str, str] = {
    "blackbox": "safecert.blackbox.check",
    "sequential": "safecert.blackbox.check",
    "shield": "safecert.shield.check",
    "bnn": "safecert.bnn.check",
}

#: a parsed certificate is never nested deeper than this; deeper JSON is refused before parsing
MAX_DEPTH = 64
#: certificates larger than this are refused (the largest real ones are a few MB)
MAX_BYTES = 256 << 20


class _Envelope(StrictModel):
    safecert_version: str
    created_utc: str
    parameters: dict[str, Any]
    inputs: Inputs
    seed: int | None


class BlackboxCertificate(_Envelope):
    kind: Literal["blackbox"]
    verdict: Literal["PASS", "FAIL"]
    result: BlackboxResult


class SequentialCertificate(_Envelope):
    kind: Literal["sequential"]
    verdict: Literal["PASS", "FAIL", "INCONCLUSIVE"]
    result: SequentialResult


class ShieldCertificate(_Envelope):
    kind: Literal["shield"]
    verdict: Literal["PASS", "FAIL", "BOUND"]
    result: ShieldResult


class BnnCertificate(_Envelope):
    kind: Literal["bnn"]
    verdict: Literal["SAFE", "UNKNOWN"]
    result: BnnResult


Certificate = Annotated[
    BlackboxCertificate | SequentialCertificate | ShieldCertificate | BnnCertificate,
    Field(discriminator="kind"),
]
_ADAPTER: TypeAdapter[Any] = TypeAdapter(Certificate)


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
    try:
        cert: Certificate = _ADAPTER.validate_python(data)
        return cert
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = [str(p) for p in err["loc"]]
        # the union adds the kind as a path element: certificate.result.x, not certificate.bnn.result.x
        if loc and loc[0] in CHECKERS:
            loc = loc[1:]
        where = ".".join(["certificate", *loc])
        if err["type"] == "missing":
            raise DataError(
                "is missing", field=where, fix="a certificate has no optional fields"
            ) from None
        if err["type"] == "extra_forbidden":
            raise DataError("is not a certificate field", field=where, fix="remove it") from None
        raise DataError(
            f"{err['msg']} (got {_short(err.get('input'))})",
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


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


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
    """What ``safecert verify`` found; ``ok`` only when every check matched (and there was one).
    ``verdict``: the verdict the verified certificate states (None when its signature failed
    and nothing else was read); it is what ``ok`` vouches for."""

    kind: str
    checks: list[Check] = field(default_factory=list)
    verdict: str | None = None

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def add(self, name: str, ok: bool, detail: str = "") -> None:
        self.checks.append(Check(name, bool(ok), detail))

    def equal(self, name: str, recomputed: Any, claimed: Any) -> bool:
        """Add a check that ``recomputed == claimed``; the detail shows both values."""
        ok = _same(recomputed, claimed)
        self.add(
            name,
            ok,
            f"{_short(recomputed)}"
            if ok
            else f"recomputed {_short(recomputed)}, certificate {_short(claimed)}",
        )
        return ok

    def compare_documents(self, name: str, recomputed: Any, claimed: Any, limit: int = 20) -> bool:
        """One failing check per differing path of two JSON documents (at most ``limit``), or
        one passing check when they are equal."""
        fresh, given = to_jsonable(recomputed), to_jsonable(claimed)
        diffs = list(_diff(fresh, given, name))
        if not diffs:
            self.add(name, True, "equal to the recomputed value")
            return True
        for path, mine, theirs in diffs[:limit]:
            self.add(path, False, f"recomputed {_short(mine)}, certificate {_short(theirs)}")
        if len(diffs) > limit:
            self.add(name, False, f"{len(diffs) - limit} more differences")
        return False


_ABSENT = object()


def _same(a: Any, b: Any) -> bool:
    return not list(_diff(to_jsonable(a), to_jsonable(b), ""))


def _diff(a: Any, b: Any, path: str) -> Iterator[tuple[str, Any, Any]]:
    """Paths where two JSON values differ. Floats must be equal to the last bit: the checker runs
    the same deterministic code on the same evidence, so any difference is a change."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            yield from _diff(a.get(key, _ABSENT), b.get(key, _ABSENT), f"{path}.{key}")
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            yield f"{path} (length)", len(a), len(b)
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            yield from _diff(x, y, f"{path}[{i}]")
    elif a is _ABSENT or b is _ABSENT:
        yield path, "(absent)" if a is _ABSENT else a, "(absent)" if b is _ABSENT else b
    elif type(a) is not type(b) and not (
        isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool)
    ):
        yield path, a, b
    elif a != b:
        yield path, a, b


@dataclass(frozen=True)
class Evidence:
    """Where the evidence behind a certificate lives, and how hard to check it.

    ``data_dir``: the run folder (default: the certificate's folder); ``logs``: the shield's logs;
    ``inputs_dir``: where the user's input files are now (default: ``inputs.root`` as recorded),
    for checking a certificate on another machine; ``resimulate``: black-box episodes to re-run.
    """

    certificate_path: Path
    logs: Path | None = None
    data_dir: Path | None = None
    inputs_dir: Path | None = None
    resimulate: int = 0


def locate_input(cert: Certificate, entry: FileDigest, evidence: Evidence) -> Path:
    """Where the input file ``entry`` of ``cert.inputs.files`` is to be found now."""
    path = Path(entry.path)
    if path.is_absolute():
        return path
    root = Path(evidence.inputs_dir) if evidence.inputs_dir else Path(cert.inputs.root)
    return root / path


def locate_evidence(entry: FileDigest, evidence: Evidence) -> Path:
    """Where the evidence file ``entry`` of ``cert.inputs.evidence`` is to be found now: by its
    file name in ``--data DIR`` when given, else at its path relative to the certificate."""
    path = Path(entry.path)
    if evidence.data_dir:
        return Path(evidence.data_dir) / path.name
    if path.is_absolute():
        return path
    return Path(evidence.certificate_path).parent / path


def check_file_digests(cert: Certificate, evidence: Evidence, report: VerificationReport) -> None:
    """Re-hash every ``bytes`` digest in ``cert.inputs`` and re-list every ``listing`` (the
    importable files of a folder; ``rows`` digests are the engine's)."""
    entries = [(e, locate_input(cert, e, evidence)) for e in cert.inputs.files]
    entries += [(e, locate_evidence(e, evidence)) for e in cert.inputs.evidence]
    for entry, path in entries:
        if entry.digest_of == "listing":
            _check_listing(cert, entry, path, report)
            continue
        if entry.digest_of != "bytes":
            continue
        name = f"{entry.role} sha256 ({entry.path})"
        if not path.is_file():
            report.add(name, False, f"{path} does not exist (pass --inputs DIR or --data DIR)")
            continue
        report.equal(name, sha256_file(path), entry.sha256)


def _check_listing(
    cert: Certificate, entry: FileDigest, folder: Path, report: VerificationReport
) -> None:
    """The folder's importable files are exactly those certified: any extra one is named."""
    from safecert.isolation import listing_digest, loadable_code

    name = f"{entry.role} listing: the files Python can import from {entry.path}"
    if not folder.is_dir():
        report.add(name, False, f"{folder} is not a folder (pass --inputs DIR)")
        return
    certified = {Path(e.path).as_posix() for e in cert.inputs.files if e.digest_of == "bytes"}
    try:
        present = {p.relative_to(folder).as_posix() for p in loadable_code(folder)}
        fresh = listing_digest(folder)
    except SafecertError as exc:
        report.add(name, False, str(exc))
        return
    extra = sorted(present - certified)
    detail = (
        f"not certified, importable by the policy or environment: {', '.join(extra[:5])}"
        if extra
        else f"sha256 {fresh}, claimed {entry.sha256}"
    )
    report.add(name, fresh == entry.sha256 and not extra, detail)


def verify_certificate(cert: Certificate, evidence: Evidence) -> VerificationReport:
    """Check every input and evidence digest first; when one fails, stop there — nothing from
    the inputs is imported, started or read as code. Otherwise dispatch to the engine's checker
    for ``cert.kind``."""
    digests = VerificationReport(cert.kind)
    check_file_digests(cert, evidence, digests)
    if not digests.ok:
        return digests
    module_name = CHECKERS[cert.kind]
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
