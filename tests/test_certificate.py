from __future__ import annotations

import json

import numpy as np
import pytest

from safecert.certificate import (
    canonical_json,
    content_sha256,
    make_certificate,
    read_certificate,
    sha256_file,
    write_certificate,
)
from safecert.errors import DataError


def _cert():
    return make_certificate(
        "blackbox",
        "PASS",
        parameters={"b": np.float64(0.5), "a": (1, 2)},
        inputs={"config_sha256": "00"},
        seed=3,
        result={"x": np.arange(3)},
    )


def test_roundtrip_and_canonical(tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")
    path = write_certificate(_cert(), tmp_path / "c.json")
    again = write_certificate(_cert(), tmp_path / "d.json")
    assert path.read_bytes() == again.read_bytes()
    cert = read_certificate(path)
    assert cert.created_utc == "1970-01-01T00:00:00Z"
    assert cert.result == {"x": [0, 1, 2]}
    assert list(json.loads(path.read_text())) == sorted(json.loads(path.read_text()))
    assert content_sha256(cert) == content_sha256(_cert())


def test_sha256_file(tmp_path):
    import hashlib

    p = tmp_path / "f"
    p.write_bytes(b"x" * 3_000_000)
    assert sha256_file(p) == hashlib.sha256(b"x" * 3_000_000).hexdigest()


def test_nan_rejected():
    with pytest.raises(DataError):
        canonical_json({"a": float("nan")})
    with pytest.raises(DataError):
        make_certificate(
            "bnn", "SAFE", parameters={}, inputs={}, seed=None, result={"v": float("inf")}
        )


def test_malformed_certificates(tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps({"kind": "blackbox"}))
    with pytest.raises(DataError, match="certificate"):
        read_certificate(p)
    good = json.loads(canonical_json(_cert().model_dump(mode="json")))
    good["verdict"] = "MAYBE"
    p.write_text(json.dumps(good))
    with pytest.raises(DataError, match="certificate.verdict"):
        read_certificate(p)
