"""``safecert certify`` starts the policy worker before it imports the engine (issue 28.3): the
worker takes no policy code before its first request, and the run takes that worker over."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import traceback

import numpy as np
import pytest

from safecert import procs
from safecert.blackbox.oracles import parse_oracle_spec
from tests.blackbox import pipeline_helpers

cli_here = pipeline_helpers.cli_here  # the in-process CLI fixture

POLICY = """
import pathlib
pathlib.Path(__file__).with_name("imported.txt").write_text("policy code ran")
import numpy as np

def act(obs):
    obs = np.asarray(obs)
    if obs.ndim == 1:  # batched = false: one observation
        return int(obs[2] > 0)
    return (obs[:, 2] > 0).astype(np.int64)
"""

CONFIG = """
policy = "python:pol:act"
env = "CartPole-v1"
episodes = 2
max_steps = 20
{options}
[spec]
budget = 100.0
goal = "no_termination"
cost = 'info.get("cost", 0)'
"""


def test_the_gated_worker_runs_no_policy_code_before_its_first_request(tmp_path):
    (tmp_path / "pol.py").write_text(POLICY)
    marker = tmp_path / "imported.txt"
    argv = parse_oracle_spec("python:pol:act", base_dir=tmp_path).argv
    assert argv[-1] == "gated"

    done = subprocess.run(argv, cwd=tmp_path, input=b"", capture_output=True, timeout=120)
    assert done.returncode == 0 and done.stdout == b"", done.stderr
    assert not marker.exists()  # end of input before a request: the policy was never loaded

    done = subprocess.run(argv[:-1], cwd=tmp_path, input=b"", capture_output=True, timeout=120)
    assert done.stdout == b'{"ready":true}\n', done.stderr  # older callers: loaded at start-up
    assert marker.exists()
    marker.unlink()

    request = b'{"observations": [[0.0, 0.0, 0.1, 0.0]]}\n'
    done = subprocess.run(argv, cwd=tmp_path, input=request, capture_output=True, timeout=120)
    assert done.stdout.splitlines() == [b'{"ready":true}', b'{"actions":[1]}'], done.stderr
    assert marker.exists()


@pytest.mark.parametrize(
    "options", ["", 'trust = "isolated"\ntimeout_s = 5\nretries = 1\nbatched = false']
)
def test_certify_takes_over_the_policy_worker_it_started_early(
    cli_here, tmp_path, monkeypatch, options
):
    (tmp_path / "pol.py").write_text(POLICY)
    config = tmp_path / "run.toml"
    config.write_text(textwrap.dedent(CONFIG.format(options=options)))
    started: list[tuple[tuple[str, ...], bool]] = []  # (argv, started before the plan?)
    real = procs.VendorProcess

    def recorded(argv, **kwargs):
        callers = {frame.name for frame in traceback.extract_stack()}
        started.append((tuple(argv), "plan_run" not in callers and "lent_oracle" not in callers))
        return real(argv, **kwargs)

    monkeypatch.setattr(procs, "VendorProcess", recorded)
    res = cli_here("certify", config, "--out", tmp_path / "out", "--workers", "1")
    assert res.code in (0, 1), res.stderr
    workers = [early for a, early in started if "safecert.blackbox.oracles.worker" in a]
    assert workers == [True], started  # the one started early ran the check and the episodes
    assert (tmp_path / "out" / "certificate.json").is_file()
    assert cli_here("verify", tmp_path / "out" / "certificate.json").code == 0


def test_a_policy_module_that_does_not_exist_is_one_line_naming_policy(cli_here, tmp_path):
    config = tmp_path / "run.toml"
    config.write_text(textwrap.dedent(CONFIG.format(options="")))
    res = cli_here("certify", config, "--out", tmp_path / "out")
    lines = res.stderr.strip().splitlines()
    assert res.code == 2 and len(lines) == 1 and "policy" in lines[0], res.stderr
    assert "pol" in lines[0] and "Traceback" not in res.stderr


def test_a_fixed_n_run_builds_no_sequential_model(tmp_path):
    """The sequential result and certificate models are built on first use (defer_build)."""
    (tmp_path / "pol.py").write_text(POLICY)
    config = tmp_path / "run.toml"
    config.write_text(textwrap.dedent(CONFIG.format(options='trust = "in-process"')))
    script = f"""
import sys
from safecert.cli.main import main
code = main(["certify", {str(config)!r}, "--out", {str(tmp_path / "out")!r}])
from safecert.blackbox import result
from safecert.certificate import blackbox
built = [m.__name__ for m in (result.SequentialCell, result.SequentialDecision,
    result.SequentialBlock, result.SequentialResult, blackbox.SequentialCertificate)
    if m.__pydantic_complete__]
print(code, built, blackbox.BlackboxCertificate.__pydantic_complete__)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.stdout.splitlines()[-1] in ("0 [] True", "1 [] True"), done.stderr[-2000:]


def test_the_early_start_does_not_wait_for_the_supervisor(tmp_path, monkeypatch):
    """:meth:`Channel.start` returns without reading the vendor supervisor's report (one bare
    interpreter start-up the caller spends on its own imports); the first round trip reads it."""
    (tmp_path / "pol.py").write_text(POLICY)
    reports: list[int] = []
    real = procs.VendorProcess._read_report

    def counted(self, fd):
        reports.append(fd)
        return real(self, fd)

    monkeypatch.setattr(procs.VendorProcess, "_read_report", counted)
    from safecert.blackbox.oracles import make_oracle

    oracle = make_oracle(parse_oracle_spec("python:pol:act", base_dir=tmp_path))
    try:
        oracle.start()  # type: ignore[attr-defined]
        assert reports == []
        assert oracle.act(np.zeros((1, 4))).tolist() == [0]
        assert len(reports) == 1
    finally:
        oracle.close()


def test_a_deferred_start_that_fails_fails_its_first_call(tmp_path):
    """A vendor program that cannot be started: with ``wait=False`` the ``OSError`` comes from
    :meth:`VendorProcess.started` (the supervisor reaped, nothing left running), and a channel
    started early fails its first call with the same one line."""
    from safecert.isolation import Channel, ChannelFailure

    missing = str(tmp_path / "missing")
    vendor = procs.VendorProcess([missing], wait=False)
    with pytest.raises(OSError):
        vendor.started()
    vendor.kill()  # a no-op after a failed start
    assert vendor.poll() is not None
    channel = Channel((missing,), cwd=str(tmp_path), timeout_s=5.0, handshake=True)
    channel.start()
    with pytest.raises(ChannelFailure, match="cannot start"):
        channel.round_trip(b"{}")
    assert channel.pid is None
    channel.close()
