"""The building blocks of every certificate: strict models, digests and durable writes (its
canonical JSON is :mod:`safecert.canonical`).

Certificates are documents someone signs, so every model here is *strict*: unknown keys are
rejected, nothing is coerced (``"0.05"`` is not a number, ``true`` is not ``1``), and no field has a
default — a missing field is a validation error, never a silently assumed value. Engine result
models (``safecert.<engine>.result``) derive from :class:`StrictModel`.

Digests: :class:`FileDigest` records one file (its role, where it was, its SHA-256). A digest is
either of the file's bytes (``digest_of = "bytes"``) or, for the black-box episode store, of its
canonical rows (``"rows"``: SQLite files change bytes without changing content).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, StringConstraints

Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


#: certificates larger than this are refused (the largest real ones are a few MB)
MAX_BYTES = 256 << 20


class StrictModel(BaseModel):
    """Frozen, no extra keys, no coercion, no defaults (by convention: declare none)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class FileDigest(StrictModel):
    """One file the certificate depends on.

    ``path`` is relative to :attr:`Inputs.root` for ``Inputs.files`` and relative to the
    certificate's own folder for ``Inputs.evidence`` (absolute when the file lay elsewhere).
    """

    role: str
    path: str
    sha256: Sha256
    digest_of: Literal["bytes", "rows", "listing"]


class Inputs(StrictModel):
    """Everything the claim rests on, by digest.

    ``files``: what the user supplied (config, policy artifacts, env module, model, logs);
    ``evidence``: what the run produced and the checker re-reads (episode store, model copy, policy
    copy). ``safecert verify`` re-hashes every entry and fails on any difference.
    """

    root: str
    files: list[FileDigest]
    evidence: list[FileDigest]


def sha256_file(path: Path, chunk_bytes: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes, streamed."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as fh:
        while block := fh.read(chunk_bytes):
            digest.update(block)
    return digest.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_digest(role: str, path: Path, root: Path) -> FileDigest:
    """Digest of ``path``'s bytes, recorded relative to ``root`` when it lies under it."""
    path = Path(path).resolve()
    try:
        shown = path.relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        shown = str(path)
    return FileDigest(role=role, path=shown, sha256=sha256_file(path), digest_of="bytes")


def durable_write(path: Path, data: bytes | str, *, mode: int = 0o644) -> Path:
    """Write ``data`` to ``path`` so that a crash leaves either the old file or the new one.

    A temporary file in the same folder is written and ``fsync``\\ ed, renamed over ``path``
    (atomic on POSIX), and the folder is ``fsync``\\ ed so the rename itself survives a power loss.
    The file gets ``mode`` (default world-readable: certificates are meant to be shared).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path


def fsync_dir(folder: Path) -> None:
    """``fsync`` a folder (makes a rename or a new file in it durable)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def signature_path(path: Path) -> Path:
    """Where the signature of ``path`` lives: ``certificate.json`` → ``certificate.json.sig``
    (:mod:`safecert.signing` writes and checks it; a report only looks whether it is there)."""
    path = Path(path)
    return path.with_name(path.name + ".sig")
