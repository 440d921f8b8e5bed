"""Signed certificates end to end: keygen, certify --sign-key, sign, verify --pubkey."""

from __future__ import annotations

import json

import pytest

from tests.blackbox.pipeline_helpers import cartpole_run, cli_here

__all__ = ["cli_here"]


@pytest.fixture(scope="module")
def signed(tmp_path_factory):
    """(run folder, key, public key) of a tiny CartPole run signed as it was written."""
    from safecert.cli.main import main

    base = tmp_path_factory.mktemp("signed")
    assert main(["keygen", "--out", str(base / "keys")]) == 0
    key, pub = base / "keys" / "safecert_ed25519.key", base / "keys" / "safecert_ed25519.pub"
    config = cartpole_run(base / "in", episodes=4, max_steps=30)
    out = base / "run"
    code = main(
        ["certify", str(config), "--out", str(out), "--workers", "1", "--sign-key", str(key)]
    )
    assert code in (0, 1)
    assert (out / "certificate.json.sig").is_file()
    return out, key, pub


def _copy(signed, tmp_path):
    import shutil

    out = tmp_path / "run"
    shutil.copytree(signed[0], out)
    return out / "certificate.json"


def test_signed_certificate_verifies_with_its_key(signed, cli_here):
    res = cli_here("verify", signed[0] / "certificate.json", "--pubkey", signed[2], "--json")
    assert res.code == 0, res.stdout
    names = {c["name"] for c in res.json()["checks"]}
    assert {"signature", "signature key", "result"} <= names
    assert res.json()["signature_checked"] is True


@pytest.mark.parametrize("where", [0, 1, 100, -2, -1, "middle"])
def test_a_flipped_byte_anywhere_fails_with_exit_1(signed, cli_here, tmp_path, where):
    cert = _copy(signed, tmp_path)
    data = bytearray(cert.read_bytes())
    i = len(data) // 2 if where == "middle" else where
    data[i] ^= 0x01
    cert.write_bytes(bytes(data))
    assert cli_here("verify", cert, "--pubkey", signed[2]).code == 1


def test_another_key_and_a_missing_signature_fail(signed, cli_here, tmp_path):
    from safecert.cli.main import main

    assert main(["keygen", "--out", str(tmp_path / "other")]) == 0
    other = tmp_path / "other" / "safecert_ed25519.pub"
    res = cli_here("verify", signed[0] / "certificate.json", "--pubkey", other)
    assert res.code == 1 and "signed by" in res.stdout
    cert = _copy(signed, tmp_path)
    (cert.parent / "certificate.json.sig").unlink()
    assert cli_here("verify", cert, "--pubkey", signed[2]).code == 1
    assert cli_here("verify", cert).code == 0  # unsigned checking still works, and says so


def test_resigning_after_an_edit_needs_the_private_key(signed, cli_here, tmp_path):
    """A forger who edits and re-signs with their own key is caught by the auditor's --pubkey."""
    from safecert.cli.main import main

    cert = _copy(signed, tmp_path)
    data = json.loads(cert.read_text())
    data["verdict"] = "PASS" if data["verdict"] == "FAIL" else "FAIL"
    from safecert.certificate import canonical_json

    cert.write_text(canonical_json(data))
    assert main(["keygen", "--out", str(tmp_path / "forger")]) == 0
    assert (
        main(["sign", str(cert), "--key", str(tmp_path / "forger" / "safecert_ed25519.key")]) == 0
    )
    assert cli_here("verify", cert, "--pubkey", signed[2]).code == 1


def test_sign_command_signs_an_existing_certificate(signed, cli_here, tmp_path):
    cert = _copy(signed, tmp_path)
    (cert.parent / "certificate.json.sig").unlink()
    assert cli_here("sign", cert, "--key", signed[1]).code == 0
    assert cli_here("verify", cert, "--pubkey", signed[2]).code == 0
    bad = cli_here("sign", cert, "--key", signed[2])  # a public key cannot sign
    assert bad.code == 2 and bad.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("option", "value"),
    [("--inputs", "/nonexistent/folder"), ("--data", "/nonexistent/run"), ("--logs", "/no.jsonl")],
)
def test_verify_options_naming_nothing_are_bad_input(signed, cli_here, option, value):
    """A folder or file option that names nothing is exit 2 with one line, not a failed check."""
    res = cli_here("verify", signed[0] / "certificate.json", option, value)
    assert res.code == 2
    assert option in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_verify_parses_the_bytes_whose_signature_it_checked(
    signed, cli_here, tmp_path, monkeypatch
):
    """A certificate swapped on disk right after its signature was checked is never parsed:
    verify reads the file once and checks and parses the same bytes."""
    import safecert.signing as signing

    cert = _copy(signed, tmp_path)
    real = signing.check_signature

    def check_then_swap(*args, **kwargs):
        checks = real(*args, **kwargs)
        cert.write_bytes(b'{"not": "the signed certificate"}')
        return checks

    monkeypatch.setattr(signing, "check_signature", check_then_swap)
    res = cli_here("verify", cert, "--pubkey", signed[2], "--inputs", signed[0].parent / "in")
    assert res.code in (0, 1), res.stderr  # judged on the signed bytes, not exit 2 on the swap
    assert "not the signed" not in res.stdout + res.stderr
