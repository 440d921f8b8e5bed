"""The kind="shield" checker: re-derives the result from the logs, catches every edit.

(The end-to-end forgeries through `safecert verify` are in test_forgery.py.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from safecert.audit import Evidence
from safecert.certificate import read_certificate
from safecert.cli.main import main
from safecert.errors import DataError
from safecert.shield.check import check

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "shield"


@pytest.fixture(scope="module")
def cert_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("cert")
    logs = out / "logs.jsonl"
    shutil.copyfile(EXAMPLES / "grid_logs.jsonl", logs)
    code = main(["shield", "synthesize", "--model", str(EXAMPLES / "grid.toml"), "--logs",
                 str(logs), "--epsilon", "0.2", "--method", "additive", "--out", str(out),
                 "--json"])  # fmt: skip
    assert code == 0
    return out


def _check(path: Path, **kw):
    return check(read_certificate(path), Evidence(path, **kw))


def _failed(report):
    return {c.name for c in report.checks if not c.ok}


def test_genuine_certificate_verifies(cert_dir):
    report = _check(cert_dir / "certificate.json")
    assert report.ok, [(c.name, c.detail) for c in report.checks]
    names = [c.name for c in report.checks]
    assert names[-2:] == ["result", "verdict"]
    assert (
        sum("sha256" in n for n in names) == 5
    )  # model, logs, model copy, shield.json, copy = model
    assert any(n.startswith("shield.json = synthesize(additive") for n in names)


def test_edits_are_caught(cert_dir, tmp_path):
    def edited(fn):
        d = tmp_path / f"e{len(list(tmp_path.iterdir()))}"
        shutil.copytree(cert_dir, d)
        cert = json.loads((d / "certificate.json").read_text())
        fn(cert)
        (d / "certificate.json").write_text(json.dumps(cert))
        return _failed(_check(d / "certificate.json"))

    def drop_forbidden(c):  # quietly re-permit a forbidden move in the result only
        c["result"]["allowed"]["r1c3"] = ["up", "down", "left", "right", "halt"]

    def more_visits(c):
        c["result"]["rows"][0]["visits"] += 1

    def verdict(c):
        c["verdict"] = "FAIL"

    def drop_halt(c):
        c["result"]["allowed"]["r0c0"].remove("halt")

    assert {"shield.json = result.allowed", "result.allowed.r1c3 (length)"} <= edited(
        drop_forbidden
    )
    assert edited(more_visits) == {"result.rows[0].visits"}
    assert edited(verdict) == {"verdict"}
    assert "halt permitted in every state of result.allowed" in edited(drop_halt)


def test_changed_logs_or_model_are_caught(cert_dir, tmp_path):
    d = tmp_path / "d"
    shutil.copytree(cert_dir, d)
    lines = (d / "logs.jsonl").read_text().splitlines()
    (d / "logs.jsonl").write_text("\n".join(lines[:-16]) + "\n")  # drop the last lock-step rows
    failed = _failed(_check(d / "certificate.json", logs=d / "logs.jsonl"))
    assert f"logs sha256 ({d / 'logs.jsonl'})" in failed and "result.steps" in failed
    (d / "model.toml").write_text((d / "model.toml").read_text() + "\n# edited\n")
    failed = _failed(_check(d / "certificate.json", logs=cert_dir / "logs.jsonl"))
    assert failed == {"model-copy sha256 (model.toml)"}  # a comment changes no number


def test_missing_logs_is_a_one_line_error(cert_dir, tmp_path):
    d = tmp_path / "x"
    d.mkdir()
    shutil.copyfile(cert_dir / "certificate.json", d / "certificate.json")
    shutil.copyfile(cert_dir / "model.toml", d / "model.toml")
    cert = json.loads((d / "certificate.json").read_text())
    for entry in cert["inputs"]["files"]:
        if entry["role"] == "logs":
            entry["path"] = str(tmp_path / "gone.jsonl")
    (d / "certificate.json").write_text(json.dumps(cert))
    with pytest.raises(DataError, match="cannot find the logs"):
        _check(d / "certificate.json")
