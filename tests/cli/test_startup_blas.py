"""OpenBLAS's idle threads in a ``safecert`` process (:mod:`safecert.cli.blas`): as its own
process, ``safecert`` and the workers it starts let idle BLAS threads sleep at once; a user's own
setting is kept; called in another program, nothing is set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

POLICY = """
import os, pathlib
import numpy as np

pathlib.Path(__file__).with_name("env.txt").write_text(
    os.environ.get("OPENBLAS_THREAD_TIMEOUT", "unset")
)

def act(obs):
    return (np.asarray(obs)[:, 2] > 0).astype(np.int64)
"""

CONFIG = """
policy = "python:pol:act"
env = "CartPole-v1"
episodes = 1
max_steps = 5
workers = 1
[spec]
budget = 100.0
goal = "no_termination"
cost = 'info.get("cost", 0)'
"""

SHOW = """
import json, os, sys
sys.argv = ["safecert", "--version"]
from safecert.cli.main import main
code = main()
print(json.dumps([code, os.environ.get("OPENBLAS_THREAD_TIMEOUT")]))
"""


def _environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    return {**env, **extra}


def _shown(**extra: str) -> list:
    done = subprocess.run(
        [sys.executable, "-c", SHOW],
        capture_output=True,
        text=True,
        env=_environment(**extra),
        check=True,
        timeout=120,
    )
    return json.loads(done.stdout.splitlines()[-1])


def test_the_policy_worker_of_a_certify_process_lets_idle_blas_threads_sleep(tmp_path):
    """The policy worker (isolated, the default) imports the policy with the variable set, as
    the judging process had it before its own NumPy import."""
    (tmp_path / "pol.py").write_text(POLICY)
    (tmp_path / "run.toml").write_text(textwrap.dedent(CONFIG))
    done = subprocess.run(
        [sys.executable, "-m", "safecert.cli.main", "certify", "run.toml", "--out", "out"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=_environment(),
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stderr
    assert (tmp_path / "env.txt").read_text() == "4"


def test_a_safecert_process_sets_the_idle_spin_unless_the_user_did():
    assert _shown() == [0, "4"]
    assert _shown(OPENBLAS_THREAD_TIMEOUT="20") == [0, "20"]


def test_main_called_in_another_program_sets_nothing(monkeypatch):
    from safecert.cli.main import main

    monkeypatch.delenv("OPENBLAS_THREAD_TIMEOUT", raising=False)
    assert main(["--version"]) == 0
    assert "OPENBLAS_THREAD_TIMEOUT" not in os.environ
