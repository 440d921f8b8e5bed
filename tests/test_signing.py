"""Ed25519 certificate signatures: round trip, tamper detection, malformed input, key handling,
and the file formats checked by independent routes (cryptography directly, OpenSSL, RFC 8032)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import typer
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from safecert.canonical import canonical_json
from safecert.cli import keys as keys_cli
from safecert.errors import ConfigError, DataError
from safecert.signing import (
    PRIVATE_KEY_NAME,
    PUBLIC_KEY_NAME,
    check_signature,
    fingerprint,
    generate_keypair,
    load_private_key,
    load_public_key,
    parse_signature,
    sign_file,
    signature_path,
)

CERT_BYTES = b'{\n  "kind": "blackbox",\n  "verdict": "PASS"\n}\n' + bytes(range(256))
SIG_FIELDS = {"algorithm", "public_key_fingerprint", "signed_file", "signed_sha256", "signature"}


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _by_name(checks) -> dict:
    return {c.name: c for c in checks}


@pytest.fixture(scope="module")
def signed(tmp_path_factory):
    """A key pair and a signed file; tests that change the file restore it."""
    folder = tmp_path_factory.mktemp("signed")
    key, pub = generate_keypair(folder / "keys")
    cert = folder / "certificate.json"
    cert.write_bytes(CERT_BYTES)
    sign_file(cert, key)
    return cert, key, pub


# -- round trip and format ---------------------------------------------------------------------


def test_sign_then_check_ok(signed):
    cert, _, pub = signed
    checks = check_signature(cert, pub)
    assert [c.name for c in checks] == [
        "signature file",
        "signature key",
        "signed sha256",
        "signature",
    ]
    assert all(c.ok for c in checks), checks


def test_sig_document_format(signed):
    cert, key, pub = signed
    sig_path = signature_path(cert)
    assert sig_path == cert.parent / "certificate.json.sig"
    raw = sig_path.read_bytes()
    doc = json.loads(raw)
    assert set(doc) == SIG_FIELDS
    assert raw.decode() == canonical_json(doc)  # canonical: re-serialising changes nothing
    assert doc["algorithm"] == "ed25519"
    assert doc["signed_file"] == "certificate.json"
    assert doc["signed_sha256"] == hashlib.sha256(CERT_BYTES).hexdigest()
    assert len(base64.b64decode(doc["signature"], validate=True)) == 64
    raw_pub = load_public_key(pub).public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    assert doc["public_key_fingerprint"] == "SHA256:" + hashlib.sha256(raw_pub).hexdigest()
    assert fingerprint(load_private_key(key).public_key()) == doc["public_key_fingerprint"]


def test_signature_verifies_with_cryptography_directly(signed):
    """The .pub is plain SubjectPublicKeyInfo PEM and the signature raw Ed25519 over the bytes."""
    cert, _, pub = signed
    public_key = serialization.load_pem_public_key(pub.read_bytes())
    assert isinstance(public_key, Ed25519PublicKey)
    doc = json.loads(signature_path(cert).read_bytes())
    public_key.verify(base64.b64decode(doc["signature"]), cert.read_bytes())  # raises if bad


# RFC 8032 section 7.1, TEST 1 (empty message) and TEST 2 (one byte 0x72)
RFC8032 = [
    (
        "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
        b"",
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155"
        "5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
    ),
    (
        "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
        "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
        b"\x72",
        "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da"
        "085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00",
    ),
]


@pytest.mark.parametrize(("secret", "public", "message", "signature"), RFC8032)
def test_rfc8032_vectors(tmp_path, secret, public, message, signature):
    key = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(secret))
    key_path = tmp_path / "k.pem"
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    target = tmp_path / "msg"
    target.write_bytes(message)
    doc = json.loads(sign_file(target, key_path).read_bytes())
    assert base64.b64decode(doc["signature"]).hex() == signature
    assert (
        doc["public_key_fingerprint"]
        == "SHA256:" + hashlib.sha256(bytes.fromhex(public)).hexdigest()
    )


# -- tampering ---------------------------------------------------------------------------------


def _check_with(cert: Path, pub: Path, data: bytes, sig_doc: dict | None = None):
    """check_signature with the file temporarily holding ``data`` (and the .sig ``sig_doc``)."""
    sig_path = signature_path(cert)
    original, original_sig = cert.read_bytes(), sig_path.read_bytes()
    try:
        cert.write_bytes(data)
        if sig_doc is not None:
            sig_path.write_text(json.dumps(sig_doc))  # not canonical_json: lets inf/NaN through
        return _by_name(check_signature(cert, pub))
    finally:
        cert.write_bytes(original)
        sig_path.write_bytes(original_sig)


@pytest.mark.parametrize("position", [0, 1, 17, len(CERT_BYTES) // 2, len(CERT_BYTES) - 1])
@pytest.mark.parametrize("mask", [0x01, 0x80, 0xFF])
def test_flipping_any_byte_fails(signed, position, mask):
    cert, _, pub = signed
    data = bytearray(CERT_BYTES)
    data[position] ^= mask
    checks = _check_with(cert, pub, bytes(data))
    assert not checks["signature"].ok
    assert not checks["signed sha256"].ok
    assert "changed since it was signed" in checks["signed sha256"].detail
    assert checks["signature key"].ok  # the right key; the bytes are what differ


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(position=st.integers(0, len(CERT_BYTES) - 1), mask=st.integers(1, 255))
def test_flipping_any_byte_fails_property(signed, position, mask):
    cert, _, pub = signed
    data = bytearray(CERT_BYTES)
    data[position] ^= mask
    assert not _check_with(cert, pub, bytes(data))["signature"].ok
    assert all(_check_with(cert, pub, CERT_BYTES)[n].ok for n in ("signature", "signed sha256"))


@pytest.mark.parametrize(
    "data",
    [
        CERT_BYTES[:-1],
        CERT_BYTES + b"\n",
        b"",
        b" " + CERT_BYTES,
        CERT_BYTES.replace(b"PASS", b"FAIL"),
    ],
    ids=["truncated", "appended", "empty", "prepended", "verdict-edited"],
)
def test_edited_file_fails(signed, data):
    cert, _, pub = signed
    assert not _check_with(cert, pub, data)["signature"].ok


def test_forger_who_also_edits_the_sig_hints_still_fails(signed):
    """signed_sha256 and the fingerprint are unsigned hints: fixing them up does not help."""
    cert, _, pub = signed
    forged = CERT_BYTES.replace(b"PASS", b"FAIL")
    doc = json.loads(signature_path(cert).read_bytes())
    doc["signed_sha256"] = hashlib.sha256(forged).hexdigest()
    checks = _check_with(cert, pub, forged, doc)
    assert checks["signed sha256"].ok and checks["signature key"].ok
    assert not checks["signature"].ok


def test_different_key_pair_fails(signed, tmp_path):
    cert, _, pub = signed
    _, other_pub = generate_keypair(tmp_path / "other")
    checks = _by_name(check_signature(cert, other_pub))
    assert not checks["signature key"].ok
    assert not checks["signature"].ok
    mine = fingerprint(load_public_key(pub))
    theirs = fingerprint(load_public_key(other_pub))
    assert mine != theirs
    assert checks["signature key"].detail == f"signed by {mine} but --pubkey is {theirs}"
    # claiming the verifier's fingerprint in the .sig does not make the signature verify
    doc = json.loads(signature_path(cert).read_bytes())
    doc["public_key_fingerprint"] = theirs
    relabelled = _check_with(cert, other_pub, CERT_BYTES, doc)
    assert relabelled["signature key"].ok and not relabelled["signature"].ok


def test_signature_from_another_key_with_right_fingerprint_fails(signed, tmp_path):
    """A .sig made with another key but labelled with the verifier's fingerprint fails."""
    cert, _, pub = signed
    other_key, _ = generate_keypair(tmp_path / "other")
    sig = load_private_key(other_key).sign(CERT_BYTES)
    doc = json.loads(signature_path(cert).read_bytes())
    doc["signature"] = base64.b64encode(sig).decode()
    checks = _check_with(cert, pub, CERT_BYTES, doc)
    assert checks["signature key"].ok and checks["signed sha256"].ok
    assert not checks["signature"].ok


# -- missing and malformed .sig ----------------------------------------------------------------


def test_missing_sig_fails(tmp_path, signed):
    _, _, pub = signed
    cert = tmp_path / "certificate.json"
    cert.write_bytes(CERT_BYTES)
    checks = check_signature(cert, pub)
    assert len(checks) == 1 and not checks[0].ok
    assert "certificate.json.sig does not exist" in checks[0].detail


def _valid_doc(signed) -> dict:
    cert, _, _ = signed
    return json.loads(signature_path(cert).read_bytes())


def _malformed(signed) -> dict[str, bytes]:
    doc = _valid_doc(signed)
    text = canonical_json(doc).encode()

    def edited(**changes) -> bytes:
        return canonical_json({**doc, **changes}).encode()

    without = dict(doc)
    del without["signature"]
    return {
        "garbage": bytes(range(255, -1, -1)) * 4,
        "empty": b"",
        "truncated-json": text[: len(text) // 2],
        "not-an-object": b"[1, 2, 3]\n",
        "null": b"null",
        "wrong-base64": edited(signature="!!not base64!!"),
        "short-signature": edited(signature=base64.b64encode(b"\x00" * 63).decode()),
        "unicode-signature": edited(signature="é" * 88),
        "wrong-algorithm": edited(algorithm="rsa-pss"),
        "bad-fingerprint": edited(public_key_fingerprint="SHA256:xyz"),
        "bad-sha256": edited(signed_sha256="ABC"),
        "number-field": edited(signed_file=7),
        "missing-field": canonical_json(without).encode(),
        "extra-field": edited(comment="hi"),
        "oversized": b" " * (64 << 10) + text,
        "deeply-nested": b"[" * 60000 + b"]" * 60000,
        "huge-int": b'{"algorithm": ' + b"9" * 50000 + b"}",
        "utf16": text.decode().encode("utf-16"),
    }


MALFORMED_CASES = [
    "garbage",
    "empty",
    "truncated-json",
    "not-an-object",
    "null",
    "wrong-base64",
    "short-signature",
    "unicode-signature",
    "wrong-algorithm",
    "bad-fingerprint",
    "bad-sha256",
    "number-field",
    "missing-field",
    "extra-field",
    "oversized",
    "deeply-nested",
    "huge-int",
    "utf16",
]


@pytest.mark.parametrize("case", MALFORMED_CASES)
def test_malformed_sig_is_a_failing_check(signed, tmp_path, case):
    _, _, pub = signed
    cert = tmp_path / "certificate.json"
    cert.write_bytes(CERT_BYTES)
    signature_path(cert).write_bytes(_malformed(signed)[case])
    checks = check_signature(cert, pub)
    assert len(checks) == 1
    assert checks[0].name == "signature file" and not checks[0].ok
    assert "\n" not in checks[0].detail and str(signature_path(cert)) in checks[0].detail


def test_malformed_details_say_what_is_wrong(signed):
    cases = _malformed(signed)
    expect = {
        "garbage": "not UTF-8",
        "truncated-json": "not valid JSON",
        "wrong-base64": "not base64",
        "short-signature": "63 bytes",
        "wrong-algorithm": "'rsa-pss'",
        "missing-field": "lacks signature",
        "extra-field": "unknown field(s) comment",
        "oversized": "larger than 64 KiB",
    }
    for case, needle in expect.items():
        with pytest.raises(DataError, match="signature file") as err:
            parse_signature(cases[case])
        assert needle in str(err.value), (case, str(err.value))


def test_sig_that_is_a_folder_is_a_failing_check(signed, tmp_path):
    _, _, pub = signed
    cert = tmp_path / "certificate.json"
    cert.write_bytes(CERT_BYTES)
    signature_path(cert).mkdir()
    checks = check_signature(cert, pub)
    assert len(checks) == 1 and not checks[0].ok


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=400))
def test_parse_signature_fuzz_raises_only_data_error(raw):
    try:
        parse_signature(raw)
    except DataError:
        return
    raise AssertionError(f"random bytes parsed as a signature: {raw!r}")


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=100),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(field=st.sampled_from(sorted(SIG_FIELDS)), value=JSON_VALUES)
def test_sig_field_fuzz_never_raises(signed, field, value):
    """Any value in any field: a list of checks, never an exception; a changed field other than
    the unsigned ``signed_file`` hint makes the signature fail."""
    cert, _, pub = signed
    doc = _valid_doc(signed)
    checks = _check_with(cert, pub, CERT_BYTES, {**doc, field: value})
    if field != "signed_file" and value != doc[field]:
        assert not all(c.ok for c in checks.values())


# -- keys --------------------------------------------------------------------------------------


def test_keygen_modes_and_formats(tmp_path):
    old = os.umask(0)  # even with a permissive umask the private key is owner-only
    try:
        key, pub = generate_keypair(tmp_path / "new" / "keys")
    finally:
        os.umask(old)
    assert (key.name, pub.name) == (PRIVATE_KEY_NAME, PUBLIC_KEY_NAME)
    assert _mode(key) == 0o600
    assert _mode(pub) == 0o644
    assert _mode(key.parent) == 0o700
    assert key.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----\n")  # PKCS#8, unencrypted
    assert pub.read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----\n")  # SubjectPublicKeyInfo
    private = serialization.load_pem_private_key(key.read_bytes(), password=None)
    assert isinstance(private, Ed25519PrivateKey)
    assert fingerprint(private.public_key()) == fingerprint(load_public_key(pub))
    assert [p.name for p in key.parent.iterdir() if p.name.startswith(".")] == []  # no temp left


def test_sig_file_is_world_readable(signed):
    cert, _, _ = signed
    assert _mode(signature_path(cert)) == 0o644


def test_keygen_refuses_to_overwrite(tmp_path):
    key, pub = generate_keypair(tmp_path)
    before = key.read_bytes(), pub.read_bytes()
    with pytest.raises(ConfigError, match="--out") as err:
        generate_keypair(tmp_path)
    assert "already exists" in str(err.value)
    assert (key.read_bytes(), pub.read_bytes()) == before
    pub_only = tmp_path / "pub_only"
    pub_only.mkdir()
    (pub_only / PUBLIC_KEY_NAME).write_bytes(before[1])
    with pytest.raises(ConfigError, match="--out"):
        generate_keypair(pub_only)
    assert not (pub_only / PRIVATE_KEY_NAME).exists()


def test_keygen_never_overwrites_a_key_that_appears_meanwhile(tmp_path, monkeypatch):
    """A concurrent keygen writing the key between the existence check and the write loses
    nothing: the key is linked into place exclusively."""
    from cryptography.hazmat.primitives.asymmetric import ed25519

    real = ed25519.Ed25519PrivateKey

    class Racing:
        @staticmethod
        def generate():
            (tmp_path / PRIVATE_KEY_NAME).write_bytes(b"the other run's key")
            return real.generate()

    monkeypatch.setattr(ed25519, "Ed25519PrivateKey", Racing)  # imported at the call
    with pytest.raises(ConfigError, match="--out"):
        generate_keypair(tmp_path)
    assert (tmp_path / PRIVATE_KEY_NAME).read_bytes() == b"the other run's key"
    assert sorted(p.name for p in tmp_path.iterdir()) == [PRIVATE_KEY_NAME]


def test_keygen_out_is_a_file(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError, match="--out"):
        generate_keypair(tmp_path / "f")


def test_public_key_as_signing_key_is_config_error(signed, tmp_path):
    _, _, pub = signed
    target = tmp_path / "c.json"
    target.write_bytes(CERT_BYTES)
    with pytest.raises(ConfigError, match="--sign-key") as err:
        sign_file(target, pub)
    assert "public key" in str(err.value) and PRIVATE_KEY_NAME in str(err.value)
    with pytest.raises(ConfigError, match="--key"):
        sign_file(target, pub, option="--key")
    assert not signature_path(target).exists()


def _bad_keys(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    ec_key = ec.generate_private_key(ec.SECP256R1())
    ec_path = tmp_path / "ec.pem"
    ec_path.write_bytes(
        ec_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    enc_path = tmp_path / "enc.pem"
    enc_path.write_bytes(
        Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"pw"),
        )
    )
    text_path = tmp_path / "notes.txt"
    text_path.write_text("hello")
    binary_path = tmp_path / "junk.bin"
    binary_path.write_bytes(bytes(range(256)))
    big_path = tmp_path / "big.pem"
    big_path.write_bytes(b"A" * (65 << 10))
    return {
        "missing": (tmp_path / "nope.key", "does not exist"),
        "folder": (tmp_path, "not a file"),
        "not-pem": (text_path, "not a PEM private key"),
        "binary": (binary_path, "not a PEM private key"),
        "ec": (ec_path, "not Ed25519"),
        "encrypted": (enc_path, "encrypted"),
        "too-big": (big_path, "larger than"),
    }


@pytest.mark.parametrize(
    "case", ["missing", "folder", "not-pem", "binary", "ec", "encrypted", "too-big"]
)
def test_bad_signing_key_is_one_line_config_error(tmp_path, case):
    path, needle = _bad_keys(tmp_path)[case]
    target = tmp_path / "c.json"
    target.write_bytes(CERT_BYTES)
    with pytest.raises(ConfigError) as err:
        sign_file(target, path)
    message = str(err.value)
    assert message.startswith("--sign-key: ") and needle in message and "\n" not in message
    assert not signature_path(target).exists()


def test_bad_public_key_is_config_error(signed, tmp_path):
    cert, key, _ = signed
    with pytest.raises(ConfigError, match="--pubkey: .*private key"):
        check_signature(cert, key)
    for path, _ in _bad_keys(tmp_path).values():
        with pytest.raises(ConfigError, match="^--pubkey: "):
            check_signature(cert, path)


def test_sign_missing_file_is_data_error(signed, tmp_path):
    _, key, _ = signed
    with pytest.raises(DataError, match="certificate"):
        sign_file(tmp_path / "absent.json", key)


# -- OpenSSL: an independent implementation reads the same files --------------------------------


def _openssl_rawin() -> bool:
    if shutil.which("openssl") is None:
        return False
    out = subprocess.run(["openssl", "pkeyutl", "-help"], capture_output=True, text=True)
    return "-rawin" in out.stdout + out.stderr


needs_openssl = pytest.mark.skipif(not _openssl_rawin(), reason="needs openssl >= 3 (-rawin)")


def _openssl(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(["openssl", *map(str, args)], capture_output=True, timeout=60)


@needs_openssl
def test_openssl_verifies_our_signature_and_key_files(signed, tmp_path):
    cert, key, pub = signed
    raw_sig = tmp_path / "sig.bin"
    raw_sig.write_bytes(
        base64.b64decode(json.loads(signature_path(cert).read_bytes())["signature"])
    )
    ok = _openssl(
        "pkeyutl", "-verify", "-pubin", "-inkey", pub, "-rawin", "-in", cert, "-sigfile", raw_sig
    )
    assert ok.returncode == 0, ok.stderr
    tampered = tmp_path / "tampered.json"
    tampered.write_bytes(CERT_BYTES[:-1] + b"\x00")
    bad = _openssl(
        "pkeyutl",
        "-verify",
        "-pubin",
        "-inkey",
        pub,
        "-rawin",
        "-in",
        tampered,
        "-sigfile",
        raw_sig,
    )
    assert bad.returncode != 0
    # openssl derives the same public key from our private key, and the same fingerprint
    derived = _openssl("pkey", "-in", key, "-pubout")
    assert derived.returncode == 0 and derived.stdout == pub.read_bytes()
    der = _openssl("pkey", "-pubin", "-in", pub, "-outform", "DER").stdout
    assert fingerprint(load_public_key(pub)) == "SHA256:" + hashlib.sha256(der[-32:]).hexdigest()
    # Ed25519 is deterministic: openssl's signature with our key equals ours byte for byte
    theirs = tmp_path / "theirs.bin"
    made = _openssl("pkeyutl", "-sign", "-inkey", key, "-rawin", "-in", cert, "-out", theirs)
    assert made.returncode == 0, made.stderr
    assert theirs.read_bytes() == raw_sig.read_bytes()


@needs_openssl
def test_we_sign_with_an_openssl_generated_key(tmp_path):
    key, pub = tmp_path / "k.pem", tmp_path / "p.pem"
    assert _openssl("genpkey", "-algorithm", "ed25519", "-out", key).returncode == 0
    assert _openssl("pkey", "-in", key, "-pubout", "-out", pub).returncode == 0
    cert = tmp_path / "certificate.json"
    cert.write_bytes(CERT_BYTES)
    sign_file(cert, key)
    assert all(c.ok for c in check_signature(cert, pub))


# -- the commands ------------------------------------------------------------------------------


@pytest.fixture
def app():
    app = typer.Typer()
    app.command()(keys_cli.keygen)
    app.command()(keys_cli.sign)
    return app


def test_keygen_command(app, tmp_path):
    res = CliRunner().invoke(app, ["keygen", "--out", str(tmp_path / "k"), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert set(data) == {"private_key", "public_key", "fingerprint"}
    assert data["fingerprint"] == fingerprint(load_public_key(Path(data["public_key"])))
    human = CliRunner().invoke(app, ["keygen", "--out", str(tmp_path / "h")])
    assert human.exit_code == 0 and "fingerprint  SHA256:" in human.stdout
    again = CliRunner().invoke(app, ["keygen", "--out", str(tmp_path / "k")])
    assert isinstance(again.exception, ConfigError) and "--out" in str(again.exception)


def test_sign_command_refuses_a_non_certificate(app, signed, tmp_path):
    _, key, _ = signed
    target = tmp_path / "notes.json"
    target.write_text('{"hello": 1}')
    res = CliRunner().invoke(app, ["sign", str(target), "--key", str(key)])
    assert isinstance(res.exception, DataError) and "certificate" in str(res.exception)
    assert not signature_path(target).exists()


def test_sign_command_bad_key_names_key_option(app, signed, tmp_path):
    _, _, pub = signed
    target = tmp_path / "c.json"
    target.write_bytes(CERT_BYTES)
    res = CliRunner().invoke(app, ["sign", str(target), "--key", str(pub)])
    assert isinstance(res.exception, ConfigError) and str(res.exception).startswith("--key: ")


def test_sign_command_signs(app, signed, tmp_path, monkeypatch):
    """With the certificate check stubbed (certificates are built by the engines' tests), the
    command writes CERT.sig that checks out."""
    import safecert.certificate

    _, key, pub = signed
    target = tmp_path / "certificate.json"
    target.write_bytes(CERT_BYTES)
    seen = []
    monkeypatch.setattr(safecert.certificate, "read_certificate", lambda p: seen.append(p))
    res = CliRunner().invoke(app, ["sign", str(target), "--key", str(key), "--json"])
    assert res.exit_code == 0, res.output
    assert seen == [target]
    data = json.loads(res.stdout)
    assert data["signature_file"] == str(signature_path(target))
    assert data["fingerprint"] == fingerprint(load_public_key(pub))
    assert all(c.ok for c in check_signature(target, pub))
