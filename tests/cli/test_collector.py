"""The garbage collector of a ``safecert`` process (:mod:`safecert.cli.collector`): as its own
process, ``certify`` freezes its start-up and runs its episodes with the collector on; called in
another program, it leaves the collector as it found it."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import textwrap

POLICY = """
import gc, json, pathlib
import numpy as np

def act(obs):
    state = [gc.isenabled(), gc.get_freeze_count()]
    pathlib.Path(__file__).with_name("gc.json").write_text(json.dumps(state))
    return (np.asarray(obs)[:, 2] > 0).astype(np.int64)
"""

CONFIG = """
policy = "python:pol:act"
env = "CartPole-v1"
episodes = 1
max_steps = 5
workers = 1
trust = "in-process"
[spec]
budget = 100.0
goal = "no_termination"
cost = 'info.get("cost", 0)'
"""


def _folder(tmp_path):
    (tmp_path / "pol.py").write_text(POLICY)
    (tmp_path / "run.toml").write_text(textwrap.dedent(CONFIG))
    return tmp_path


def test_a_certify_process_freezes_its_start_up_and_collects_during_its_episodes(tmp_path):
    folder = _folder(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "safecert.cli.main", "certify", "run.toml", "--out", "out"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stderr
    enabled, frozen = json.loads((folder / "gc.json").read_text())
    assert enabled  # the episodes run with the collector on
    assert frozen > 10_000  # the modules, models and schemas of the start-up: never traced again


def test_certify_called_in_process_leaves_the_collector_alone(tmp_path):
    from safecert.cli.main import main

    folder = _folder(tmp_path)
    frozen_before = gc.get_freeze_count()
    code = main(["certify", str(folder / "run.toml"), "--out", str(folder / "out")])
    assert code in (0, 1)
    assert json.loads((folder / "gc.json").read_text()) == [True, frozen_before]
    assert gc.isenabled() and gc.get_freeze_count() == frozen_before
