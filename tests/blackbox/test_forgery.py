"""A forgery corpus for black-box certificates: every edit an auditor would try must fail
``safecert verify`` (exit 1), a malformed certificate is one line (exit 2), the untouched
certificate verifies (exit 0).

One real fixed-N run and one real sequential run (CartPole, a ``python:`` policy and a ``python:``
env factory, so every kind of input is hashed) are made once per module; each test edits a copy.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import textwrap
from pathlib import Path

import pytest

from safecert.blackbox.certify import build_certificate
from safecert.blackbox.plan import plan_run
from safecert.blackbox.store import EpisodeStore
from safecert.certificate import canonical_json, read_certificate
from safecert.cli.main import main
from tests.blackbox.pipeline_helpers import POLICIES

ENV = """
import gymnasium as gym

def make(**kwargs):
    return gym.make("CartPole-v1", max_episode_steps=60)
"""

CONFIG = """
policy = "python:forge_pol:cartpole"
env = "python:forge_env:make"
episodes = 16
seed = 5
batch_size = 4
artifacts = ["weights.bin"]
[spec]
budget = 0.0
p_star = 0.3
cost = 'info.get("cost", 0)'
[kpis]
return = {{ lower = 0.0, upper = 60.0 }}
[envelope]
act_noise = {{ kind = "gaussian", levels = [0.0, 0.4] }}
obs_noise = {{ kind = "gaussian", levels = [0.0, 0.3] }}
obs_ranges = [[-4.8, 4.8], [-4.0, 4.0], [-0.42, 0.42], [-4.0, 4.0]]
{extra}
"""


def _make_inputs(folder: Path, extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "forge_pol.py").write_text(POLICIES.replace("def cartpole", "def cartpole", 1))
    (folder / "forge_env.py").write_text(ENV)
    (folder / "weights.bin").write_bytes(b"\x00\x01weights")
    config = folder / "run.toml"
    config.write_text(textwrap.dedent(CONFIG.format(extra=extra)))
    return config


def _run(*args: object) -> int:
    return main([str(a) for a in args])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(inputs folder, fixed-N run folder, sequential run folder)."""
    base = tmp_path_factory.mktemp("forgery")
    inputs = base / "inputs"
    config = _make_inputs(inputs)
    fixed = base / "fixed"
    assert _run("certify", config, "--out", fixed, "--workers", "1") in (0, 1)
    seq_config = _make_inputs(base / "seq_inputs", '[sequential]\nmethod = "betting"')
    seq = base / "seq"
    assert _run("certify", seq_config, "--out", seq, "--workers", "1") in (0, 1)
    return inputs, fixed, seq


@pytest.fixture
def fixed(runs, tmp_path):
    copy = tmp_path / "fixed"
    shutil.copytree(runs[1], copy)
    return copy


def _edit(path: Path, fn) -> None:
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(canonical_json(data))


def _verify(cert: Path, *extra: object, capsys=None) -> int:
    return _run("verify", cert, *extra)


def test_untouched_certificates_verify(runs):
    _, fixed, seq = runs
    assert _verify(fixed / "certificate.json") == 0
    assert _verify(seq / "certificate.json") == 0
    cert = read_certificate(fixed / "certificate.json")
    roles = sorted(f.role for f in cert.inputs.files)
    # python: code in the folder: every importable file's bytes and the folder's listing
    assert roles == ["artifact", "code", "config", "env", "policy"]
    assert read_certificate(seq / "certificate.json").kind == "sequential"


def test_the_fixture_run_fails_somewhere(runs):
    """The forgeries below turn a FAIL into a PASS; the run must have a failing cell."""
    cert = read_certificate(runs[1] / "certificate.json")
    assert cert.verdict == "FAIL"
    assert any(c.decision == "FAIL" for c in cert.result.cells)


def _pass_everything(data: dict) -> None:
    for cell in [*data["result"]["cells"], data["result"]["stage1"]]:
        cell["decision"] = "PASS"
    data["result"]["odd"] = [c["params"] for c in data["result"]["cells"]]
    data["verdict"] = "PASS"


def test_dropped_failing_cell_with_recomputed_family(fixed, capsys):
    cert = fixed / "certificate.json"

    def drop(data):
        res = data["result"]
        failing = next(i for i, c in enumerate(res["cells"]) if c["decision"] == "FAIL")
        del res["cells"][failing]
        res["family_size"] = len(res["cells"])
        res["delta_cell"] = (1 - res["confidence"]) / res["family_size"]
        _pass_everything(data)

    _edit(cert, drop)
    capsys.readouterr()
    assert _verify(cert) == 1
    out = capsys.readouterr().out
    assert "family_size" in out and "MISMATCH" in out


def test_raised_p_star_in_result_and_parameters(fixed):
    cert = fixed / "certificate.json"

    def raise_p(data):
        data["result"]["p_star"] = 0.99
        data["parameters"]["spec"]["p_star"] = 0.99
        _pass_everything(data)

    _edit(cert, raise_p)
    assert _verify(cert) == 1


def test_raised_p_star_in_result_only(fixed):
    cert = fixed / "certificate.json"
    _edit(cert, lambda d: d["result"].__setitem__("p_star", 0.99))
    assert _verify(cert) == 1


@pytest.mark.parametrize(
    "field, value",
    [("budget", 1000.0), ("confidence", 0.5), ("episodes_per_cell", 3), ("goal", "return>=0")],
)
def test_edited_result_field(fixed, field, value):
    cert = fixed / "certificate.json"
    _edit(cert, lambda d: d["result"].__setitem__(field, value))
    assert _verify(cert) == 1


def test_envelope_seed_that_disagrees_with_parameters(fixed):
    cert = fixed / "certificate.json"
    _edit(cert, lambda d: d.__setitem__("seed", d["seed"] + 1))
    assert _verify(cert) == 1


def test_flipped_verdict_only(fixed, capsys):
    cert = fixed / "certificate.json"
    _edit(cert, lambda d: d.__setitem__("verdict", "PASS"))
    assert _verify(cert) == 1
    capsys.readouterr()
    # --json never states a forged verdict as the verdict: it is the claim, not verified
    assert _verify(cert, "--json") == 1
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and out["verdict"] is None and out["claimed_verdict"] == "PASS"
    assert out["recomputed_verdict"] == "FAIL"


def test_edited_oracle_failures_count(fixed):
    cert = fixed / "certificate.json"

    def bump(data):
        data["result"]["cells"][0]["oracle_failures"] += 1

    _edit(cert, bump)
    assert _verify(cert) == 1


def _forge_store(folder: Path, sql: str) -> None:
    """Edit the store, then recompute the whole result from it as a forger would."""
    db = sqlite3.connect(folder / "episodes.sqlite")
    with db:
        db.execute(sql)
    db.close()
    cert = read_certificate(folder / "certificate.json")
    plan = plan_run(Path(cert.inputs.root) / "run.toml")
    with EpisodeStore(folder / "episodes.sqlite", create=False) as store:
        # the forger keeps the recorded digests (recomputing them is the next test's forger)
        forged = build_certificate(plan, store).model_copy(update={"inputs": cert.inputs})
    (folder / "certificate.json").write_text(canonical_json(forged.model_dump(mode="json")))


def test_sqlite_edit_with_recomputed_result(fixed):
    _forge_store(fixed, "UPDATE episodes SET cost = 0, goal = 1")
    assert read_certificate(fixed / "certificate.json").verdict == "PASS"
    assert _verify(fixed / "certificate.json") == 1


def test_deleted_cell_in_store_with_recomputed_result(fixed):
    cert = read_certificate(fixed / "certificate.json")
    failing = next(i for i, c in enumerate(cert.result.cells) if c.decision == "FAIL")
    db = sqlite3.connect(fixed / "episodes.sqlite")
    with db:
        db.execute("DELETE FROM episodes WHERE cell = ?", (failing,))
    db.close()
    assert _verify(fixed / "certificate.json") == 1


def test_extra_episode_in_store(fixed):
    db = sqlite3.connect(fixed / "episodes.sqlite")
    with db:
        row = db.execute("SELECT * FROM episodes WHERE cell = 0 AND idx = 0").fetchone()
        db.execute("INSERT INTO episodes VALUES (?,?,?,?,?,?,?,?,?,?)", (0, 999, *row[2:]))
    db.close()
    assert _verify(fixed / "certificate.json") == 1


def test_store_forgery_with_recomputed_digest_is_caught_by_resimulation(fixed, capsys):
    """A forger who also recomputes the rows digest defeats the digest (only a signature binds
    it); re-running the stored episodes exposes the edited outcomes."""
    _forge_store(fixed, "UPDATE episodes SET cost = 0, goal = 1")
    cert_path = fixed / "certificate.json"
    with EpisodeStore(fixed / "episodes.sqlite", create=False) as store:
        digest = store.rows_sha256()

    def rehash(data):
        data["inputs"]["evidence"][0]["sha256"] = digest

    _edit(cert_path, rehash)
    assert _verify(cert_path) == 0  # what a digest alone cannot catch
    capsys.readouterr()
    # every stored episode: the draw is random, so a test that re-ran a few could miss the edits
    assert _verify(cert_path, "--resimulate", 1000) == 1
    assert "resimulated 64 episodes" in capsys.readouterr().out


def test_untouched_run_resimulates(runs):
    assert _verify(runs[1] / "certificate.json", "--resimulate", 4) == 0


@pytest.mark.parametrize("name", ["forge_pol.py", "forge_env.py", "weights.bin", "run.toml"])
def test_changed_input_file(runs, fixed, tmp_path, name):
    inputs = tmp_path / "inputs"
    shutil.copytree(runs[0], inputs)
    with (inputs / name).open("a") as fh:
        fh.write("\n# changed\n")
    assert _verify(fixed / "certificate.json", "--inputs", inputs) == 1
    fresh = tmp_path / "inputs2"
    shutil.copytree(runs[0], fresh)
    assert _verify(fixed / "certificate.json", "--inputs", fresh) == 0


def test_config_that_disagrees_with_parameters(fixed):
    """Editing parameters (and result consistently) without the config file is caught by the
    config file's own content."""
    cert = fixed / "certificate.json"
    _edit(cert, lambda d: d["parameters"].__setitem__("episodes", 3))
    assert _verify(cert) == 1


def test_sequential_forgeries(runs, tmp_path):
    seq = tmp_path / "seq"
    shutil.copytree(runs[2], seq)
    cert = seq / "certificate.json"
    original = cert.read_text()

    def flip_decision(data):
        cell = data["result"]["sequential"]["cells"][0]
        cell["decision"] = "PASS" if cell["decision"] != "PASS" else "FAIL"

    for fn in (
        flip_decision,
        lambda d: d["result"]["sequential"].__setitem__("cap", 10_000),
        lambda d: d["result"]["sequential"].__setitem__("method", "mixture"),
        lambda d: d.__setitem__("verdict", "PASS" if d["verdict"] != "PASS" else "FAIL"),
    ):
        cert.write_text(original)
        _edit(cert, fn)
        assert _verify(cert) == 1
    cert.write_text(original)
    assert _verify(cert) == 0


def test_rejudged_certificate_verifies_and_resists_forgery(fixed, capsys):
    assert _run("rejudge", fixed, "--budget", "1000", "--p-star", "0.9") in (0, 1)
    rejudged = fixed / "rejudge_d1000_p0.9" / "certificate.json"
    assert _verify(rejudged) == 0
    _edit(rejudged, lambda d: d["result"]["rejudged"].__setitem__("p_star", 0.9))
    capsys.readouterr()
    assert _verify(rejudged) == 1
    assert "rejudged" in capsys.readouterr().out


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d["result"].pop("cells"),
        lambda d: d["result"]["cells"][0].__setitem__("failures", "3"),
        lambda d: d["result"].__setitem__("p_star", "0.3"),
        lambda d: d["result"]["cells"][0].pop("oracle_failures"),
        lambda d: d["result"].__setitem__("extra", 1),
        lambda d: d.__setitem__("inputs", {"config_sha256": "00"}),
        lambda d: d.__setitem__("kind", "other"),
        lambda d: d["result"]["stage1"].__setitem__("episodes", True),
    ],
)
def test_malformed_certificate_is_one_line_exit_2(fixed, capsys, edit):
    cert = fixed / "certificate.json"
    _edit(cert, edit)
    capsys.readouterr()
    assert _verify(cert) == 2
    err = capsys.readouterr().err
    assert err.startswith("safecert: error: certificate") and err.count("\n") == 1
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "content",
    [b"\xff\xfe\x00garbage", b"[" * 100_000 + b"]" * 100_000, b"", b'{"kind": "blackbox"}'],
)
def test_garbage_certificate_is_one_line_exit_2(tmp_path, capsys, content):
    cert = tmp_path / "certificate.json"
    cert.write_bytes(content)
    capsys.readouterr()
    assert _verify(cert) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_resume_refuses_a_changed_policy(tmp_path, capsys):
    """(A module of its own: this process already imported ``forge_pol`` from another folder.)"""
    config = _make_inputs(tmp_path / "inputs")
    (tmp_path / "inputs" / "forge_pol.py").rename(tmp_path / "inputs" / "resume_pol.py")
    out = tmp_path / "run"
    text = config.read_text().replace("episodes = 16", "episodes = 2")
    config.write_text(text.replace("forge_pol", "resume_pol"))
    assert _run("certify", config, "--out", out, "--workers", "1") in (0, 1)
    with (tmp_path / "inputs" / "resume_pol.py").open("a") as fh:
        fh.write("\n# vendor v2\n")
    capsys.readouterr()
    assert _run("certify", config, "--out", out, "--workers", "1", "--resume") == 2
    err = capsys.readouterr().err
    assert "resume_pol.py" in err and err.count("\n") == 1


def test_exec_policies_are_identified_by_every_file_they_name(tmp_path):
    """``exec:awk -f vendor.awk`` and ``exec:node vendor.js --model=w.bin`` (programs on PATH):
    the script and every file argument are artifacts, so the certificate hashes them."""
    from safecert.blackbox.oracles import parse_oracle_spec

    for name in ("vendor.awk", "vendor.js", "w.bin"):
        (tmp_path / name).write_text("x")
    awk = parse_oracle_spec("exec:awk -f vendor.awk", base_dir=tmp_path)
    assert awk.artifacts == (str((tmp_path / "vendor.awk").resolve()),)
    sh = parse_oracle_spec("exec:sh vendor.js --model=w.bin --verbose", base_dir=tmp_path)
    assert set(sh.artifacts) == {str((tmp_path / n).resolve()) for n in ("vendor.js", "w.bin")}
