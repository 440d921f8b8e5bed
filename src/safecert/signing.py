"""Ed25519 signatures over certificate files (RFC 8032, PureEdDSA).

``safecert keygen --out DIR`` writes a key pair; ``safecert sign CERT --key KEY`` (or
``--sign-key`` on a certifying command) writes ``CERT.sig`` next to the certificate; ``safecert
verify CERT --pubkey PUB`` checks it.

**The guarantee.** A signature that verifies under a public key proves that the holder of the
matching private key signed *exactly these bytes* of the certificate file — every byte, in order;
one flipped, added or removed byte makes it fail.

**What it does not prove.** That the claim inside the certificate is true (that is what
``safecert verify`` re-derives from the evidence); that the evidence files are the ones the signer
saw beyond what their digests in the certificate pin down; *who* holds the key (bind the public
key, or its fingerprint, to a person or team through a channel you trust); that the key was not
stolen, or was still meant to be valid at any given time (there is no revocation and no trusted
timestamp: ``created_utc`` is the signer's own statement). The file name and the fields of the
``.sig`` document other than ``signature`` are not signed: they are hints that make a failure
easier to explain.

Key files are the standard formats, readable by OpenSSL and every ``cryptography`` release:

* private key ``safecert_ed25519.key``: PKCS#8 PEM, unencrypted, created with mode 0600;
* public key ``safecert_ed25519.pub``: SubjectPublicKeyInfo PEM.

A signature file ``CERT.sig`` is canonical JSON::

    {"algorithm": "ed25519",
     "public_key_fingerprint": "SHA256:<hex SHA-256 of the raw 32-byte public key>",
     "signed_file": "<the certificate's file name when it was signed>",
     "signed_sha256": "<hex SHA-256 of the signed bytes>",
     "signature": "<standard base64 of the 64-byte Ed25519 signature over the file's bytes>"}

so ``openssl pkeyutl -verify -pubin -inkey PUB -rawin -in CERT -sigfile RAW`` verifies it, with
``RAW`` the base64-decoded ``signature``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from safecert.canonical import canonical_json
from safecert.document import MAX_BYTES, durable_write, fsync_dir, sha256_bytes, signature_path
from safecert.errors import ConfigError, DataError
from safecert.verification import Check

if TYPE_CHECKING:  # cryptography is imported where a key is used: reading a report needs none
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

__all__ = [
    "ALGORITHM",
    "PRIVATE_KEY_NAME",
    "PUBLIC_KEY_NAME",
    "SignatureFile",
    "check_signature",
    "fingerprint",
    "generate_keypair",
    "load_private_key",
    "load_public_key",
    "parse_signature",
    "sign_file",
    "signature_path",
]

ALGORITHM = "ed25519"
PRIVATE_KEY_NAME = "safecert_ed25519.key"
PUBLIC_KEY_NAME = "safecert_ed25519.pub"
#: a signature file is ~300 bytes and a PEM key ~120; anything larger than this is not one
MAX_SMALL_FILE_BYTES = 64 << 10

_FIELDS = ("algorithm", "public_key_fingerprint", "signed_file", "signed_sha256", "signature")
_FINGERPRINT = re.compile(r"^SHA256:[0-9a-f]{64}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_KEYGEN_FIX = "create a key pair with 'safecert keygen --out DIR'"


def fingerprint(public_key: Ed25519PublicKey) -> str:
    """``"SHA256:"`` + hex SHA-256 of the raw 32-byte Ed25519 public key (RFC 8032 encoding).

    Equal keys, equal fingerprints; reproducible with
    ``openssl pkey -pubin -in PUB -outform DER | tail -c 32 | sha256sum``. (Not OpenSSH's
    fingerprint, which hashes the SSH wire format and prints base64.)
    """
    from cryptography.hazmat.primitives import serialization

    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "SHA256:" + hashlib.sha256(raw).hexdigest()


# -- keys -------------------------------------------------------------------------------------


def generate_keypair(out_dir: Path) -> tuple[Path, Path]:
    """Create a fresh Ed25519 key pair in ``out_dir``; return ``(private_key, public_key)`` paths.

    The private key (PKCS#8 PEM, unencrypted) is created with mode 0600 — it is never readable by
    others, not even for an instant — exclusively (an existing key is never overwritten, even by a
    concurrent run) and durably (fsync'ed file and folder). A new ``out_dir`` is created with mode
    0700. Raises :class:`ConfigError` naming ``--out`` when either key file already exists or the
    folder cannot be written.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    out_dir = Path(out_dir)
    key_path, pub_path = out_dir / PRIVATE_KEY_NAME, out_dir / PUBLIC_KEY_NAME
    for existing in (key_path, pub_path):
        if existing.exists() or existing.is_symlink():
            raise ConfigError(
                f"{existing} already exists; safecert never overwrites a key",
                field="--out",
                fix="pick another folder, or move the old key pair away first",
            )
    try:
        out_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise ConfigError(
            f"cannot create folder {out_dir} ({exc.strerror})", field="--out", fix="pass a folder"
        ) from None
    if not out_dir.is_dir():
        raise ConfigError(f"{out_dir} is not a folder", field="--out", fix="pass a folder")

    private_key = Ed25519PrivateKey.generate()
    key_pem = private_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    pub_pem = private_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    try:
        _create_secret_file(key_path, key_pem)
    except FileExistsError:
        raise ConfigError(
            f"{key_path} already exists; safecert never overwrites a key",
            field="--out",
            fix="pick another folder, or move the old key pair away first",
        ) from None
    except OSError as exc:
        raise ConfigError(
            f"cannot write {key_path} ({exc.strerror})", field="--out", fix="pass a writable folder"
        ) from None
    try:
        _write_public(pub_path, pub_pem)
    except OSError as exc:
        key_path.unlink(missing_ok=True)  # a private key without its public half helps no one
        raise ConfigError(
            f"cannot write {pub_path} ({exc.strerror})", field="--out", fix="pass a writable folder"
        ) from None
    return key_path, pub_path


def _create_secret_file(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file ``path`` with mode 0600; ``FileExistsError`` if it exists.

    Written to a 0600 temporary file, fsync'ed, then hard-linked into place: the link is atomic
    and refuses an existing name, so a crash leaves either no key or the whole key.
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.link(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    fsync_dir(path.parent)


def _write_public(path: Path, data: bytes | str) -> Path:
    """Durably write a file meant to be handed out (public key, signature): mode 0644."""
    durable_write(path, data)
    os.chmod(path, 0o644)
    return path


def _read_small(path: Path, option: str, what: str) -> bytes:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(
            f"{path} does not exist" if not path.exists() else f"{path} is not a file",
            field=option,
            fix=f"pass the {what} ({_KEYGEN_FIX} if you have none)",
        )
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_SMALL_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{path} cannot be read ({exc.strerror})", field=option) from None
    if len(data) > MAX_SMALL_FILE_BYTES:
        raise ConfigError(
            f"{path} is larger than {MAX_SMALL_FILE_BYTES >> 10} KiB, not a PEM key",
            field=option,
            fix=f"pass the {what}",
        )
    return data


def load_private_key(path: Path, *, option: str = "--sign-key") -> Ed25519PrivateKey:
    """Read an unencrypted PKCS#8 PEM Ed25519 private key; any problem is one :class:`ConfigError`
    naming ``option`` (``--sign-key`` or ``--key``) with the fix."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    data = _read_small(path, option, f"private key ({PRIVATE_KEY_NAME})")
    if b"PUBLIC KEY-----" in data:
        raise ConfigError(
            f"{path} is a public key, which cannot sign",
            field=option,
            fix=f"pass the private key ({PRIVATE_KEY_NAME}) from the same folder",
        )
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:  # raised by cryptography for an encrypted key without a password
        raise ConfigError(
            f"{path} is encrypted; safecert reads unencrypted PKCS#8 keys",
            field=option,
            fix="decrypt it with 'openssl pkey -in KEY -out PLAIN' and keep PLAIN mode 0600",
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise ConfigError(
            f"{path} is not a PEM private key",
            field=option,
            fix=f"pass the {PRIVATE_KEY_NAME} written by 'safecert keygen'",
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(
            f"{path} holds a {_key_type(key)} key, not Ed25519",
            field=option,
            fix=f"{_KEYGEN_FIX} (or 'openssl genpkey -algorithm ed25519')",
        )
    return key


def load_public_key(path: Path, *, option: str = "--pubkey") -> Ed25519PublicKey:
    """Read a SubjectPublicKeyInfo PEM Ed25519 public key; any problem is one
    :class:`ConfigError` naming ``option`` with the fix."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    data = _read_small(path, option, f"public key ({PUBLIC_KEY_NAME})")
    if b"PRIVATE KEY-----" in data:
        raise ConfigError(
            f"{path} is a private key; a verifier needs only the public key",
            field=option,
            fix=f"pass {PUBLIC_KEY_NAME} and keep the private key to the signer",
        )
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm):
        raise ConfigError(
            f"{path} is not a PEM public key",
            field=option,
            fix=f"pass the {PUBLIC_KEY_NAME} written by 'safecert keygen'",
        ) from None
    if not isinstance(key, Ed25519PublicKey):
        raise ConfigError(
            f"{path} holds a {_key_type(key)} key, not Ed25519",
            field=option,
            fix=f"pass the signer's {PUBLIC_KEY_NAME}",
        )
    return key


def _key_type(key: object) -> str:
    return type(key).__name__.removeprefix("_").replace("PrivateKey", "").replace("PublicKey", "")


# -- signing ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SignatureFile:
    """A parsed ``.sig`` document; ``signature`` holds the raw 64 signature bytes."""

    algorithm: str
    public_key_fingerprint: str
    signed_file: str
    signed_sha256: str
    signature: bytes


def sign_file(path: Path, key_path: Path, *, option: str = "--sign-key") -> Path:
    """Sign the exact bytes of ``path`` with the Ed25519 private key at ``key_path``; durably
    write ``PATH.sig`` (format: module docstring) and return its path.

    The key is read and checked before anything is written; a bad key is one
    :class:`ConfigError` naming ``option``. A missing or unreadable ``path`` is a
    :class:`DataError`.
    """
    private_key = load_private_key(key_path, option=option)
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DataError(
            f"{path} cannot be read ({exc.strerror})",
            field="certificate",
            fix="pass a certificate.json",
        ) from None
    document = {
        "algorithm": ALGORITHM,
        "public_key_fingerprint": fingerprint(private_key.public_key()),
        "signed_file": path.name,
        "signed_sha256": sha256_bytes(data),
        "signature": base64.b64encode(private_key.sign(data)).decode("ascii"),
    }
    return _write_public(signature_path(path), canonical_json(document))


def parse_signature(raw: bytes, *, source: str = "signature file") -> SignatureFile:
    """Parse the bytes of a ``.sig`` file; anything but a well-formed one is one
    :class:`DataError` line, naming ``source``, saying what is wrong (never another exception)."""

    def bad(problem: str) -> DataError:
        return DataError(problem, field=source, fix="re-sign with 'safecert sign CERT --key KEY'")

    if len(raw) > MAX_SMALL_FILE_BYTES:
        raise bad(f"is larger than {MAX_SMALL_FILE_BYTES >> 10} KiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise bad(f"is not UTF-8 text (byte {exc.start})") from None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise bad(f"is not valid JSON ({str(exc)[:80]})") from None
    if not isinstance(data, dict):
        raise bad(f"holds a JSON {type(data).__name__}, not an object")
    missing = [k for k in _FIELDS if k not in data]
    extra = sorted(str(k) for k in data if k not in _FIELDS)
    if missing:
        raise bad(f"lacks {', '.join(missing)}")
    if extra:
        raise bad(f"has unknown field(s) {', '.join(extra)[:80]}")
    not_text = [k for k in _FIELDS if not isinstance(data[k], str)]
    if not_text:
        raise bad(f"{', '.join(not_text)} must be text")
    if data["algorithm"] != ALGORITHM:
        raise bad(f"algorithm is {data['algorithm'][:40]!r}; safecert signs with {ALGORITHM!r}")
    if not _FINGERPRINT.match(data["public_key_fingerprint"]):
        raise bad("public_key_fingerprint is not SHA256: followed by 64 hex digits")
    if not _SHA256.match(data["signed_sha256"]):
        raise bad("signed_sha256 is not 64 lowercase hex digits")
    try:
        signature = base64.b64decode(data["signature"].encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error):
        raise bad("signature is not base64") from None
    if len(signature) != 64:
        raise bad(f"signature holds {len(signature)} bytes; an Ed25519 signature has 64")
    return SignatureFile(
        algorithm=data["algorithm"],
        public_key_fingerprint=data["public_key_fingerprint"],
        signed_file=data["signed_file"],
        signed_sha256=data["signed_sha256"],
        signature=signature,
    )


# -- checking ---------------------------------------------------------------------------------


def check_signature(cert_path: Path, pubkey_path: Path, data: bytes | None = None) -> list[Check]:
    """Check ``CERT.sig`` against the certificate's bytes (``data`` when given: the bytes the
    caller read and will parse) and the public key at ``pubkey_path``.

    Checks, each a :class:`Check` whose detail says what differs: ``signature file`` (exists,
    well-formed), ``signature key`` (signed under the fingerprint of ``pubkey_path``), ``signed
    sha256`` (the file still has the bytes that were signed), ``signature`` (Ed25519 verifies
    over the file's exact bytes — the check that carries the guarantee; the others explain a
    failure). A missing, malformed or mismatching signature is a failing check, never an
    exception; a bad ``--pubkey`` file is a :class:`ConfigError` (bad input, exit 2).
    """
    from cryptography.exceptions import InvalidSignature

    public_key = load_public_key(pubkey_path)
    cert_path, sig_path = Path(cert_path), signature_path(cert_path)
    expected = fingerprint(public_key)

    if not sig_path.is_file():
        return [
            Check(
                "signature file",
                False,
                f"{sig_path} does not exist (sign with 'safecert sign {cert_path.name} --key KEY')",
            )
        ]
    try:
        with sig_path.open("rb") as fh:
            raw = fh.read(MAX_SMALL_FILE_BYTES + 1)
        sig = parse_signature(raw, source=str(sig_path))
    except OSError as exc:
        return [Check("signature file", False, f"{sig_path} cannot be read ({exc.strerror})")]
    except DataError as exc:
        return [Check("signature file", False, str(exc))]
    try:
        if data is None:
            with cert_path.open("rb") as fh:
                data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        return [Check("signature file", False, f"{cert_path} cannot be read ({exc.strerror})")]
    if len(data) > MAX_BYTES:
        return [Check("signature file", False, f"{cert_path} is larger than {MAX_BYTES >> 20} MiB")]

    checks = [
        Check(
            "signature file",
            True,
            f"{sig_path.name}: {ALGORITHM}, signed as {sig.signed_file!r}",
        )
    ]
    if sig.public_key_fingerprint == expected:
        checks.append(Check("signature key", True, f"signed by {expected}"))
    else:
        checks.append(
            Check(
                "signature key",
                False,
                f"signed by {sig.public_key_fingerprint} but --pubkey is {expected}",
            )
        )
    actual = sha256_bytes(data)
    if sig.signed_sha256 == actual:
        checks.append(Check("signed sha256", True, actual))
    else:
        checks.append(
            Check(
                "signed sha256",
                False,
                f"the file changed since it was signed: signed {sig.signed_sha256}, "
                f"file now {actual}",
            )
        )
    try:
        public_key.verify(sig.signature, data)
        checks.append(
            Check("signature", True, f"Ed25519 signature by {expected} over {len(data)} bytes")
        )
    except InvalidSignature:
        checks.append(
            Check(
                "signature",
                False,
                f"Ed25519 signature does not verify under --pubkey {expected} "
                "over the file's current bytes",
            )
        )
    return checks
