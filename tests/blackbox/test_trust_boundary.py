"""The trust boundary: vendor code never runs in the process that certifies or verifies.

A hostile ``python:`` policy and a hostile ``python:`` environment record the pid they run in and,
at import, try to make safecert pass anything (they patch the verification report and the
black-box checker). ``certify`` and ``verify`` run here, in the test's own process, through the
CLI's ``main``: every pid the vendor code records must differ from ours, the patches must not reach
us, and a forged PASS must fail — plain, with ``--resimulate`` and with ``--pubkey``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import textwrap
from pathlib import Path

import pytest

from safecert.blackbox.certify import build_certificate
from safecert.blackbox.plan import plan_run
from safecert.blackbox.store import EpisodeStore
from safecert.certificate import canonical_json, read_certificate
from safecert.cli.main import main
from safecert.verification import VerificationReport

PATCHES = """
import os, pathlib

def _record(tag):
    with open(pathlib.Path(__file__).with_name("pids.txt"), "a") as fh:
        fh.write(f"{tag} {os.getpid()}\\n")

def _patch():
    try:
        import safecert.verification as v
        v.VerificationReport.ok = property(lambda self: True)
        v.VerificationReport.failed = property(lambda self: [])
        import safecert.audit as audit
        audit.verify_certificate = lambda cert, evidence: v.VerificationReport(cert.kind)
        import safecert.blackbox.check as chk
        chk.check = lambda cert, evidence: v.VerificationReport(cert.kind)
    except Exception as exc:  # noqa: BLE001 - a vendor tries everything
        _record(f"patch-failed {exc!r}")
"""

POLICY = (
    PATCHES
    + """
import numpy as np
_record("policy-import")
_patch()

def act(obs):
    _record("policy-call")
    obs = np.asarray(obs)
    return (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)
"""
)

ENV = (
    PATCHES
    + """
import gymnasium as gym
_record("env-import")
_patch()

def make(**kwargs):
    _record("env-make")
    return gym.make("CartPole-v1", max_episode_steps=40)
"""
)

CONFIG = """
policy = "python:hostile_pol:act"
env = "python:hostile_env:make"
episodes = 24
seed = 3
batch_size = 3
[spec]
budget = 0.0
p_star = 0.25
cost = 'abs(obs[0]) > 0.05'
[kpis]
return = { lower = 0.0, upper = 40.0 }
[envelope]
act_noise = { kind = "gaussian", levels = [0.0, 0.3] }
"""


def _run(*args: object) -> int:
    return main([str(a) for a in args])


def _pids(folder: Path) -> list[tuple[str, int]]:
    path = folder / "pids.txt"
    if not path.exists():
        return []
    rows = [line.rsplit(" ", 1) for line in path.read_text().splitlines()]
    return [(tag, int(pid)) for tag, pid in rows]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    base = tmp_path_factory.mktemp("trust")
    inputs = base / "inputs"
    inputs.mkdir()
    (inputs / "hostile_pol.py").write_text(POLICY)
    (inputs / "hostile_env.py").write_text(ENV)
    (inputs / "run.toml").write_text(textwrap.dedent(CONFIG))
    out = base / "run"
    assert _run("certify", inputs / "run.toml", "--out", out, "--workers", "1") == 1
    return inputs, out


def _fresh_copy(run, tmp_path: Path) -> tuple[Path, Path]:
    import shutil

    inputs, out = run
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    (inputs / "pids.txt").unlink(missing_ok=True)
    return inputs, copy


def _assert_untouched() -> None:
    """The vendor's patches did not reach this process."""
    report = VerificationReport("blackbox")
    report.add("x", False, "")
    assert not report.ok and report.failed
    import safecert.audit as audit
    import safecert.blackbox.check as chk

    assert chk.check.__module__ == "safecert.blackbox.check"
    assert audit.verify_certificate.__module__ == "safecert.audit"


def test_certify_runs_vendor_code_in_other_processes(run):
    inputs, out = run
    pids = _pids(inputs)
    tags = {tag for tag, _ in pids}
    assert {"policy-import", "policy-call", "env-import", "env-make"} <= tags
    assert all(pid != os.getpid() for _, pid in pids)
    assert not any(tag.startswith("patch-failed") for tag in tags)  # the patches did apply there
    _assert_untouched()
    cert = read_certificate(out / "certificate.json")
    assert cert.verdict == "FAIL" and cert.parameters["trust"] == "isolated"


def _forge_pass(folder: Path) -> None:
    """Every stored episode made a success; result, verdict and rows digest recomputed."""
    db = sqlite3.connect(folder / "episodes.sqlite")
    with db:
        db.execute("UPDATE episodes SET cost = 0, goal = 1")
    db.close()
    cert = read_certificate(folder / "certificate.json")
    plan = plan_run(Path(cert.inputs.root) / "run.toml")
    with EpisodeStore(folder / "episodes.sqlite", create=False) as store:
        forged = build_certificate(plan, store).model_copy(update={"inputs": cert.inputs})
        digest = store.rows_sha256()
    data = json.loads(canonical_json(forged.model_dump(mode="json")))
    for entry in data["inputs"]["evidence"]:
        if entry["role"] == "episodes":
            entry["sha256"] = digest
    (folder / "certificate.json").write_text(canonical_json(data))
    assert read_certificate(folder / "certificate.json").verdict == "PASS"


def test_forged_pass_with_resimulation_fails_and_vendor_code_runs_elsewhere(run, tmp_path, capsys):
    inputs, copy = _fresh_copy(run, tmp_path)
    _forge_pass(copy)
    assert _run("verify", copy / "certificate.json", "--resimulate", 1000) == 1
    out = capsys.readouterr().out
    assert "MISMATCH" in out and "VERIFIED" not in out
    pids = _pids(inputs)
    assert {"policy-call", "env-make"} <= {tag for tag, _ in pids}  # resimulation ran them ...
    assert all(pid != os.getpid() for _, pid in pids)  # ... elsewhere
    _assert_untouched()


def test_plain_verify_of_the_honest_run_runs_vendor_code_elsewhere(run, tmp_path, capsys):
    inputs, copy = _fresh_copy(run, tmp_path)
    assert _run("verify", copy / "certificate.json") == 0
    assert "VERIFIED blackbox FAIL" in capsys.readouterr().out
    assert all(pid != os.getpid() for _, pid in _pids(inputs))
    _assert_untouched()


def test_signed_certificate_with_doctored_store_fails_before_any_code_runs(run, tmp_path, capsys):
    inputs, copy = _fresh_copy(run, tmp_path)
    keys = tmp_path / "keys"
    assert _run("keygen", "--out", keys) == 0
    assert _run("sign", copy / "certificate.json", "--key", keys / "safecert_ed25519.key") == 0
    db = sqlite3.connect(copy / "episodes.sqlite")
    with db:
        db.execute("UPDATE episodes SET cost = 0, goal = 1")
    db.close()
    capsys.readouterr()
    code = _run(
        "verify", copy / "certificate.json", "--pubkey", keys / "safecert_ed25519.pub",
        "--resimulate", 5, "--json",
    )  # fmt: skip
    assert code == 1
    failed = [c["name"] for c in json.loads(capsys.readouterr().out)["checks"] if not c["ok"]]
    assert failed == ["episode store rows sha256"]
    assert _pids(inputs) == []  # digests first: nothing of the inputs was imported or started
    _assert_untouched()


def test_a_module_added_next_to_the_policy_fails_verify_before_it_runs(run, tmp_path, capsys):
    inputs, copy = _fresh_copy(run, tmp_path)
    added = inputs / "sitecustom_pkg"
    added.mkdir()
    (added / "__init__.py").write_text(PATCHES + '\n_record("added-import")\n_patch()\n')
    try:
        capsys.readouterr()
        assert _run("verify", copy / "certificate.json", "--resimulate", 3) == 1
        out = capsys.readouterr().out
        assert "sitecustom_pkg/__init__.py" in out.replace("\n", "").replace(" ", "") or (
            "not certified" in out
        )
        assert _pids(inputs) == []
    finally:
        (added / "__init__.py").unlink()
        added.rmdir()
    _assert_untouched()


def test_sb3_and_torchscript_policies_load_in_a_worker(tmp_path):
    torch = pytest.importorskip("torch")
    from safecert.blackbox.oracles import make_oracle, parse_oracle_spec
    from safecert.blackbox.oracles.exec_oracle import ExecOracle

    module = torch.jit.script(torch.nn.Linear(3, 2))
    module.save(str(tmp_path / "m.pt"))
    oracle = make_oracle(parse_oracle_spec("torchscript:m.pt", base_dir=tmp_path))
    assert isinstance(oracle, ExecOracle)
    try:
        oracle.probe()
        assert oracle.channel.pid not in (None, os.getpid())
    finally:
        oracle.close()
    trusted = make_oracle(
        parse_oracle_spec("torchscript:m.pt", base_dir=tmp_path, trust="in-process")
    )
    assert not isinstance(trusted, ExecOracle)
    trusted.close()
