"""`safecert shield certify|synthesize` end to end (real subprocesses, real files)."""

from __future__ import annotations

import json
import shutil

import pytest

from safecert.cli.main import main
from tests.conftest import REPO, run_cli

EXAMPLES = REPO / "examples" / "shield"
MODEL, LOGS = (
    EXAMPLES.relative_to(REPO) / "grid.toml",
    EXAMPLES.relative_to(REPO) / "grid_logs.jsonl",
)


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth")
    # run in the repository with relative paths: inputs are recorded relative to inputs.root
    res = run_cli("shield", "synthesize", "--model", "examples/shield/grid.toml", "--logs",
                  "examples/shield/grid_logs.jsonl", "--epsilon", "0.2", "--method", "additive",
                  "--out", str(out), "--json", cwd=REPO)  # fmt: skip
    assert res.code == 0, res.stderr
    return out, res.json()


def test_synthesize_writes_certificate_table_and_map(synthesized):
    out, data = synthesized
    cert = json.loads((out / "certificate.json").read_text())
    assert cert["kind"] == "shield" and cert["verdict"] == "PASS" and data["verdict"] == "PASS"
    assert cert["parameters"] == {
        "command": "synthesize", "epsilon": 0.2, "method": "additive", "rho_min": 1e-3, "anytime": False
    }  # fmt: skip
    r = cert["result"]
    assert r["bound"] <= 0.2 and r["bound"] == data["bound"] and r["method"] == "additive"
    assert (r["epsilon"], r["horizon"], r["delta"], r["initial"]) == (0.2, 16, 0.05, "r0c0")
    assert len(r["rows"]) == 160 and all("halt" in v for v in r["allowed"].values())
    assert len(r["allowed"]) == 40  # every live state
    files = {e["role"]: e["path"] for e in cert["inputs"]["files"]}
    evidence = {e["role"]: e["path"] for e in cert["inputs"]["evidence"]}
    assert files == {
        "model": "examples/shield/grid.toml",
        "logs": "examples/shield/grid_logs.jsonl",
    }
    assert evidence == {"model-copy": "model.toml", "shield": "shield.json"}
    assert cert["inputs"]["root"] == str(REPO)
    assert (out / "shield.png").stat().st_size > 1000
    assert "| state |" in (out / "shield.md").read_text()
    assert json.loads((out / "shield.json").read_text()) == r["allowed"]


def test_certify_reproduces_the_bound_of_a_given_shield(synthesized, tmp_path):
    out, data = synthesized
    res = run_cli("shield", "certify", "--model", str(MODEL), "--logs", str(LOGS),
                  "--shield", str(out / "shield.json"), "--out", str(tmp_path), "--json",
                  cwd=REPO)  # fmt: skip
    assert res.code == 0, res.stderr
    # the same shield, the same logs: the same bound to the last bit; no ε stated -> BOUND
    assert res.json()["bound"] == data["bound"] and res.json()["verdict"] == "BOUND"
    assert res.json()["allowed"] == data["allowed"] and res.json()["halt_only_not_listed"] == []
    # a shield certificate is accepted as --shield too (its result.allowed)
    res = run_cli("shield", "certify", "--model", str(MODEL), "--logs", str(LOGS),
                  "--shield", str(out / "certificate.json"), "--out", str(tmp_path / "c"),
                  "--json")  # fmt: skip
    assert res.code == 0 and res.json()["bound"] == data["bound"], res.stderr
    # the full shield does not meet a 0.1 budget: exit 1, verdict FAIL, files still written
    res = run_cli("shield", "certify", "--model", str(MODEL), "--logs", str(LOGS),
                  "--epsilon", "0.1", "--out", str(tmp_path / "full"), cwd=REPO)  # fmt: skip
    assert res.code == 1
    cert = json.loads((tmp_path / "full" / "certificate.json").read_text())
    assert cert["verdict"] == "FAIL" and cert["result"]["bound"] > 0.9
    assert "certificate V̄_T(s0)" in res.stdout


def _in_process(capsys, *args):
    """The same command in-process (error paths: no need to pay for a subprocess each)."""
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.err


def test_bad_input_is_one_line_exit_2(tmp_path, capsys):
    bad_logs = tmp_path / "bad.jsonl"
    lines = LOGS.read_text().splitlines()[:50]
    lines[7] = lines[7].replace('"action": "', '"action": "teleport_')
    bad_logs.write_text("\n".join(lines) + "\n")
    cases = [
        (["--logs", str(bad_logs)], "bad.jsonl:8"),
        (["--logs", str(tmp_path / "none.jsonl")], "does not exist"),
        (["--logs", str(LOGS), "--method", "magic"], "method"),
        (["--logs", str(LOGS), "--epsilon", "1.5"], "--epsilon"),
        (["--logs", str(LOGS), "--sign-key", str(tmp_path / "none.pem")], "--sign-key"),
    ]
    for extra, msg in cases:
        args = ["shield", "synthesize", "--model", str(MODEL), "--epsilon", "0.1",
                "--out", str(tmp_path / "o"), *extra]  # fmt: skip
        code, err = _in_process(capsys, *args)
        assert code == 2, (extra, err)
        assert msg in err and err.count("\n") == 1 and "Traceback" not in err


def test_bad_model_is_one_line_exit_2(tmp_path):
    """A real subprocess: exit code and stderr exactly as a user sees them."""
    model = tmp_path / "m.toml"
    model.write_text(MODEL.read_text().replace('halt = "halt"', 'halt = "stop"'))
    res = run_cli("shield", "certify", "--model", str(model), "--logs", str(LOGS),
                  "--out", str(tmp_path / "o"), cwd=REPO)  # fmt: skip
    assert res.code == 2 and "halt" in res.stderr and res.stderr.count("\n") == 1


def test_verify_recomputes_and_catches_tampering(synthesized, tmp_path):
    out, _ = synthesized
    res = run_cli("verify", str(out / "certificate.json"), "--json")
    assert res.code == 0, res.stdout + res.stderr
    assert all(c["ok"] for c in res.json()["checks"])
    copy = tmp_path / "c"
    shutil.copytree(out, copy)
    cert = json.loads((copy / "certificate.json").read_text())
    cert["result"]["bound"] = cert["result"]["bound"] / 2
    (copy / "certificate.json").write_text(json.dumps(cert))
    res = run_cli("verify", str(copy / "certificate.json"), "--json")
    assert res.code == 1
    failed = {c["name"] for c in res.json()["checks"] if not c["ok"]}
    assert failed == {"result.bound"}


def test_certify_refuses_to_overwrite_its_own_shield_input(synthesized, capsys):
    out, _ = synthesized
    code, err = _in_process(capsys, "shield", "certify", "--model", str(MODEL), "--logs",
                            str(LOGS), "--shield", str(out / "shield.json"), "--out", str(out))  # fmt: skip
    assert code == 2 and "--shield" in err and err.count("\n") == 1


def test_sign_key_signs_the_certificate(tmp_path, capsys):
    from safecert.signing import generate_keypair

    key, pub = generate_keypair(tmp_path / "keys")
    out = tmp_path / "signed"
    code, err = _in_process(capsys, "shield", "certify", "--model", str(MODEL), "--logs",
                            str(LOGS), "--out", str(out),
                            "--sign-key", str(key), "--json")  # fmt: skip
    assert code == 0, err
    assert (out / "certificate.json.sig").is_file()
    code, err = _in_process(capsys, "verify", str(out / "certificate.json"), "--pubkey", str(pub))
    assert code == 0, err
