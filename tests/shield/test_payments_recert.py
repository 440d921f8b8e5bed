"""Continual re-certification on the payments walk-through (issue 23, item 5): the gateway's steps
log of guarded sessions, appended to the original logs and re-certified with anytime sets, meets
ε = 0.2 where the original logs alone do not; the deployment's own log is vacuous under the
committed budget after 300 sessions and not under anytime sets; ``verify`` re-derives the grown
certificate from the same inputs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from safecert.audit import Evidence
from safecert.certificate import read_certificate
from safecert.shield.certify import certify_shield
from safecert.shield.check import check
from tests.conftest import REPO

PAYMENTS = REPO / "examples" / "payments"
MODEL, SHIELD = PAYMENTS / "cert" / "model.toml", PAYMENTS / "cert" / "shield.json"

pytest.importorskip("mcp")  # the tools server of the example is an MCP server


def test_gateway_log_appended_and_recertified_with_anytime_sets(tmp_path, monkeypatch):
    deployed = tmp_path / "deployed.jsonl"
    proc = subprocess.run(
        [sys.executable, "deploy.py", "--sessions", "300", "--out", str(deployed)],
        cwd=PAYMENTS, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    episodes = {line.split('"episode": "')[1].split('"')[0] for line in deployed.open()}
    assert len(episodes) == 300
    grown = tmp_path / "grown.jsonl"
    grown.write_bytes((PAYMENTS / "steps.jsonl").read_bytes() + deployed.read_bytes())
    monkeypatch.chdir(tmp_path)

    def bound(logs, anytime, name):
        run = certify_shield(MODEL, logs, tmp_path / name, shield_path=SHIELD, epsilon=0.2,
                             anytime=anytime)  # fmt: skip
        return run.certificate

    original = bound(PAYMENTS / "steps.jsonl", True, "original")
    alone_committed = bound(deployed, False, "alone-committed")
    alone_anytime = bound(deployed, True, "alone-anytime")
    recert = bound(grown, True, "recert")
    # the gateway's own log: vacuous under the committed budget, informative under anytime sets
    assert alone_committed.result.bound == 1.0
    assert alone_anytime.result.bound < 0.7
    # appended to the original logs: the certificate tightens past ε = 0.2
    assert original.verdict == "FAIL" and original.result.bound > 0.2
    assert recert.verdict == "PASS" and recert.result.bound < original.result.bound
    assert recert.result.steps == original.result.steps + sum(1 for _ in deployed.open())
    cert_path = tmp_path / "recert" / "certificate.json"
    report = check(read_certificate(cert_path), Evidence(cert_path))
    assert report.ok, [(c.name, c.detail) for c in report.checks if not c.ok]
    assert read_certificate(cert_path).parameters["anytime"] is True
