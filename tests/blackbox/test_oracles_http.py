"""http(s):// oracle against a real uvicorn vendor server on 127.0.0.1 (ephemeral port)."""

from __future__ import annotations

import select
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from safecert.blackbox.oracles import OracleFailure, make_oracle, parse_oracle_spec
from safecert.blackbox.oracles.http_oracle import backoff_s
from safecert.errors import OracleError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))
from vendors.point_policies import hazard_avoider  # noqa: E402

OBS = np.random.default_rng(0).normal(size=(5, 14))


@contextmanager
def vendor_server(*args: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """Start examples/vendors/http_vendor.py on an ephemeral port; yield its base URL."""
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "vendors" / "http_vendor.py"), "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        line = proc.stdout.readline() if ready else ""
        if not line.startswith("listening on "):
            proc.kill()
            pytest.fail(f"vendor server did not start: {line!r} {proc.stderr.read()[-500:]}")
        yield line.split()[-1]
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with vendor_server("--flaky-failures", "2") as url:
        yield url


def oracle(url: str, **kw):
    return make_oracle(parse_oracle_spec(url, base_dir=EXAMPLES, **kw))


def test_batch_round_trip_one_request(server):
    o = oracle(f"{server}/act")
    o.probe()
    np.testing.assert_allclose(o.act(OBS), hazard_avoider(OBS), atol=1e-12)
    assert o.attempts == 2  # the probe and one call for the whole batch
    o.close()


def test_500s_then_success_shows_retries(server):
    o = oracle(f"{server}/flaky", retries=3)
    np.testing.assert_allclose(o.act(OBS), hazard_avoider(OBS), atol=1e-12)
    assert o.attempts == 3  # two 503s, then the answer
    o.close()
    o = oracle(f"{server}/flaky", retries=1)
    with pytest.raises(OracleFailure, match=r"HTTP 503 .*\(2 attempts\)"):
        o.act(OBS)


def test_always_500_fails_after_retries_with_backoff(server):
    o = oracle(f"{server}/fail", retries=3)
    start = time.monotonic()
    with pytest.raises(OracleFailure, match=r"HTTP 500 .*\(4 attempts\)"):
        o.act(OBS)
    assert time.monotonic() - start >= backoff_s(1) + backoff_s(2) + backoff_s(3)
    assert o.attempts == 4


def test_hang_times_out(server):
    o = oracle(f"{server}/hang", timeout_s=0.3, retries=1)
    start = time.monotonic()
    with pytest.raises(OracleFailure, match=r"no complete reply within 0.3s .*\(1 attempt\)"):
        o.act(OBS)
    assert time.monotonic() - start < 1.3  # the deadline bounds the call, retries included


@pytest.mark.parametrize(
    ("route", "reason"),
    [
        ("garbage", "not valid JSON"),
        ("wrong-shape", "expected 5 action rows, got 4"),
        ("nan", "non-finite"),
        ("no-actions", 'no "actions"'),
        ("nowhere", "HTTP 404"),
    ],
)
def test_bad_replies_are_failures_with_reason(server, route, reason):
    o = oracle(f"{server}/{route}")
    with pytest.raises(OracleFailure, match=reason):
        o.act(OBS)
    assert o.attempts == 1  # not retried: the reply itself is wrong


def test_probe_catches_wrong_url_and_refused_connection(server):
    with pytest.raises(OracleError, match="^policy: .*HTTP 404"):
        oracle(f"{server}/no-such-route").probe()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    with pytest.raises(OracleError, match="^policy: .*connection error.*refused") as info:
        oracle(f"http://127.0.0.1:{port}/act", retries=1).probe()
    assert "\n" not in str(info.value)


def test_headers_from_environment(server, monkeypatch):
    import os

    with vendor_server(env={**os.environ, "VENDOR_TOKEN": "tok-123"}) as url:
        headers = {"Authorization": "Bearer ${SAFECERT_VENDOR_TOKEN}"}
        monkeypatch.setenv("SAFECERT_VENDOR_TOKEN", "tok-123")
        assert oracle(f"{url}/auth", headers=headers).act(OBS).shape == (5, 2)
        monkeypatch.setenv("SAFECERT_VENDOR_TOKEN", "wrong")
        with pytest.raises(OracleFailure, match="HTTP 401"):
            oracle(f"{url}/auth", headers=headers).act(OBS)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_tls_certificate_is_verified(tmp_path, monkeypatch):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    with vendor_server("--certfile", str(cert), "--keyfile", str(key)) as url:
        assert url.startswith("https://")
        with pytest.raises(
            OracleError, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed"
        ):
            oracle(f"{url}/act", retries=0).probe()
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # trust this self-signed certificate
        np.testing.assert_allclose(oracle(f"{url}/act").act(OBS), hazard_avoider(OBS), atol=1e-12)
