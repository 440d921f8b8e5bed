"""``safecert verify``'s procedure: every digest first, then the engine's re-derivation.

:func:`verify_certificate` re-hashes every input and evidence file of a certificate (and re-lists
the importable code of its inputs folder) and stops at the first mismatch — before any of the
inputs' code is imported or started; then it dispatches to the engine's checker (``CHECKERS``),
which re-derives the claim from ``parameters`` and the evidence. :class:`Evidence` says where that
evidence lives now.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

from safecert.certificate import Certificate
from safecert.document import FileDigest, sha256_file
from safecert.errors import SafecertError
from safecert.extras import missing_extra
from safecert.verification import VerificationReport

__all__ = [
    "CHECKERS",
    "Evidence",
    "check_file_digests",
    "locate_evidence",
    "locate_input",
    "verify_certificate",
]

#: kind -> module holding ``check(cert, evidence) -> VerificationReport``; imported lazily so that
#: verifying one kind never needs another engine's dependencies.
CHECKERS: dict[str, str] = {
    "blackbox": "safecert.blackbox.check",
    "sequential": "safecert.blackbox.check",
    "shield": "safecert.shield.check",
    "bnn": "safecert.bnn.check",
}


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
    for ``cert.kind``. Raises :class:`~safecert.extras.MissingExtraError` naming the extra when
    the checker needs an optional package that is not installed (a module missing for any other
    reason is a broken install and propagates)."""
    digests = VerificationReport(cert.kind)
    check_file_digests(cert, evidence, digests)
    if not digests.ok:
        return digests
    module_name = CHECKERS[cert.kind]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = missing_extra(exc)
        if missing is None:
            raise
        raise missing from None
    report: VerificationReport = module.check(cert, evidence)
    return report
