"""End to end through the real CLI: certificate contents, verify, reproducibility, resume, rejudge."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from safecert.blackbox.certify import certify
from tests.blackbox.pipeline_helpers import cartpole_run, write_run

ENV = {**os.environ, "SOURCE_DATE_EPOCH": "1700000000"}


def _certify(cli, config, out, *extra):
    res = cli("certify", str(config), "--out", str(out), "--json", *extra, env=ENV)
    assert "Traceback" not in res.stderr, res.stderr
    return res


def _certify_here(config, out, workers=1):
    """In-process run (cheaper than a CLI subprocess) with the reproducible timestamp."""
    os.environ["SOURCE_DATE_EPOCH"] = ENV["SOURCE_DATE_EPOCH"]
    return certify(config, out, workers=workers, progress=False).model_dump(mode="json")


def test_certificate_follows_the_architecture_and_verifies(cli, cli_here, tmp_path):
    config = cartpole_run(tmp_path, episodes=10)
    res = _certify(cli, config, tmp_path / "out", "--workers", "1")
    assert res.code in (0, 1), res.stderr
    cert = res.json()
    assert cert["kind"] == "blackbox" and cert["verdict"] == ("PASS" if res.code == 0 else "FAIL")
    result = cert["result"]
    for key in (
        "confidence",
        "p_star",
        "budget",
        "family_size",
        "stage1",
        "cells",
        "odd",
        "obs_ranges",
    ):
        assert key in result
    assert result["family_size"] == 4 and len(result["cells"]) == 4
    cell_keys = {
        "params",
        "episodes",
        "failures",
        "task_failures",
        "safety_failures",
        "failure_rate",
        "upper_bound",
        "decision",
        "return_kpi",
        "cost_kpi",
    }
    for cell in result["cells"]:
        assert cell_keys <= set(cell) and cell["return_kpi"]["side"] == "lower"
        assert cell["cost_kpi"]["side"] == "upper" and cell["episodes"] == 10
    assert result["stage1"]["params"] == {"obs_noise": 0.0, "act_noise": 0.0}
    assert result["obs_ranges"]["estimated"] == [False, True, False, True]  # CartPole velocities
    roles = {f["role"] for f in cert["inputs"]["files"]}
    # a python: policy: its folder's importable files are inputs too (role code)
    assert roles == {"config", "policy", "code"}
    assert cert["inputs"]["evidence"][0]["role"] == "episodes"
    assert "workers" not in cert["parameters"] and "batch_size" not in cert["parameters"]
    for name in (
        "certificate.json",
        "episodes.sqlite",
        "report.html",
        "report.md",
        "odd_obs_noise_act_noise.png",
    ):
        assert (tmp_path / "out" / name).is_file()
    ok = cli_here("verify", tmp_path / "out" / "certificate.json", "--json")
    assert ok.code == 0 and ok.json()["ok"], ok.stdout
    # tamper with one stored episode: verify must notice
    db = sqlite3.connect(tmp_path / "out" / "episodes.sqlite")
    with db:
        db.execute("UPDATE episodes SET goal = 1 - goal WHERE cell = 3 AND idx = 0")
    db.close()
    bad = cli_here("verify", tmp_path / "out" / "certificate.json", "--json")
    assert bad.code == 1
    failed = {c["name"] for c in bad.json()["checks"] if not c["ok"]}
    # a store that is not the certified one ends verify there: nothing of the inputs runs on it
    assert failed == {"episode store rows sha256"}


# workers/batch size are also covered by test_rollout's record equality, byte-equal
# certificates by the resume test below
@pytest.mark.slow
def test_equal_seeds_give_bit_identical_certificates(tmp_path):
    config = cartpole_run(tmp_path, episodes=8, batch_size=3)
    a = _certify_here(config, tmp_path / "a", workers=1)
    b = _certify_here(config, tmp_path / "b", workers=2)
    assert a == b
    assert (tmp_path / "a/certificate.json").read_bytes() == (
        tmp_path / "b/certificate.json"
    ).read_bytes()
    # batch size is not part of the outcome: B = 1 gives the same result
    other = cartpole_run(tmp_path / "b1", episodes=8, batch_size=1)
    c = _certify_here(other, tmp_path / "c")
    assert c["result"] == a["result"]
    # another seed gives other episodes
    seeded = cartpole_run(tmp_path / "s", episodes=8, seed=2)
    d = _certify_here(seeded, tmp_path / "d")
    assert d["result"]["cells"] != a["result"]["cells"]


def test_grid_without_nominal_cell_runs_stage1_separately(cli_here, tmp_path):
    config = write_run(
        tmp_path,
        """
        policy = "python:bbpipe_pol:cartpole"
        env = "CartPole-v1"
        episodes = 5
        max_steps = 50
        [spec]
        cost = "0"                    # CartPole has no cost: said explicitly
        [envelope]
        act_noise = { kind = "uniform", levels = [0.1, 0.2] }
        """,
    )
    cert = _certify_here(config, tmp_path / "out")
    result = cert["result"]
    assert len(result["cells"]) == 2 and result["family_size"] == 3
    assert result["stage1"]["cell"] == 2 and result["stage1"]["params"] == {"act_noise": 0.0}
    assert cli_here("verify", str(tmp_path / "out/certificate.json")).code == 0


def test_sigkill_and_resume_lose_no_episode_and_count_none_twice(cli_here, tmp_path):
    config = cartpole_run(tmp_path, episodes=48, max_steps=100)
    out = tmp_path / "killed"
    cmd = [
        sys.executable,
        "-m",
        "safecert.cli.main",
        "certify",
        str(config),
        "--out",
        str(out),
        "--workers",
        "2",
        "--json",
    ]
    proc = subprocess.Popen(
        cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    db_path = out / "episodes.sqlite"
    deadline = time.time() + 120
    stored = 0
    while time.time() < deadline and proc.poll() is None:
        if db_path.is_file():
            try:
                stored = (
                    sqlite3.connect(db_path).execute("SELECT COUNT(*) FROM episodes").fetchone()[0]
                )
            except sqlite3.OperationalError:
                stored = 0
            if stored >= 24:
                break
        time.sleep(0.01)
    assert proc.poll() is None, "the run finished before it could be killed; raise episodes"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = sqlite3.connect(db_path).execute("SELECT COUNT(*) FROM episodes").fetchone()[0]
    assert 24 <= partial < 4 * 48
    resumed = cli_here("certify", config, "--out", out, "--json", "--workers", "2", "--resume")
    assert resumed.code in (0, 1), resumed.stderr
    rows = (
        sqlite3.connect(db_path)
        .execute("SELECT cell, COUNT(*), COUNT(DISTINCT idx) FROM episodes GROUP BY cell")
        .fetchall()
    )
    assert rows == [(c, 48, 48) for c in range(4)]
    _certify_here(config, tmp_path / "fresh")
    assert (out / "certificate.json").read_bytes() == (
        tmp_path / "fresh/certificate.json"
    ).read_bytes()
    # a second run into the same folder without --resume is refused
    again = cli_here("certify", config, "--out", out)
    assert again.code == 2 and "--resume" in again.stderr


def test_rejudge_equals_a_fresh_run_at_the_new_spec(cli_here, tmp_path):
    config = write_run(
        tmp_path,
        """
        policy = "python:bbpipe_pol:point_greedy"
        env = "SafePointGoal-v0"
        episodes = 12
        max_steps = 80
        [spec]
        goal = "info:is_success"
        budget = 0.0
        p_star = 0.2
        [envelope]
        act_noise = { levels = [0.0, 0.1] }
        """,
    )
    _certify_here(config, tmp_path / "run")
    rej = cli_here("rejudge", tmp_path / "run", "--budget", "5", "--p-star", "0.6", "--json")
    assert rej.code in (0, 1), rej.stderr
    new = rej.json()
    text = (
        config.read_text()
        .replace("budget = 0.0", "budget = 5.0")
        .replace("p_star = 0.2", "p_star = 0.6")
    )
    config2 = tmp_path / "run5.toml"
    config2.write_text(text)
    fresh = _certify_here(config2, tmp_path / "fresh")
    assert new["result"]["cells"] == fresh["result"]["cells"]
    assert new["verdict"] == fresh["verdict"] and new["parameters"]["spec"]["budget"] == 5.0
    assert new["result"]["rejudged"]["budget"] == 0.0
    folder = tmp_path / "run" / "rejudge_d5_p0.6"
    assert cli_here("verify", str(folder / "certificate.json")).code == 0
    assert (folder / "report.html").is_file()


def test_replay_reproduces_a_stored_episode(cli_here, tmp_path):
    config = cartpole_run(tmp_path, episodes=4)
    _certify_here(config, tmp_path / "out")
    res = cli_here(
        "certify", str(config), "--out", str(tmp_path / "out"), "--replay", "3:2", "--json"
    )
    assert res.code == 0, res.stderr
    data = res.json()
    assert data["matches_stored"] is True and data["replayed"]["index"] == 2
    assert data["replayed"]["seed"] == data["stored"]["seed"]


def test_unknown_backend_is_one_line_error(cli_here, tmp_path):
    config = cartpole_run(tmp_path, episodes=3)
    res = cli_here("certify", str(config), "--out", str(tmp_path / "o"), "--backend", "slurm")
    assert res.code == 2 and "--backend" in res.stderr and len(res.stderr.strip().splitlines()) == 1
