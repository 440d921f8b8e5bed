"""Helpers for the pipeline tests: tiny policies and configs written into a temporary folder."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.conftest import CliResult

POLICIES = '''
import numpy as np

def cartpole(obs):
    """Balances CartPole; elementwise, so each row is answered independently of the batch."""
    obs = np.asarray(obs)
    return (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)

def pendulum(obs):
    obs = np.asarray(obs)
    return np.clip(-2.0 * obs[:, 2:3] - 0.5 * obs[:, 1:2], -2.0, 2.0)

def point_greedy(obs):
    """Drives straight at the goal, ignoring hazards (reaches the goal, pays cost)."""
    obs = np.asarray(obs)
    return np.clip(3.0 * obs[:, 4:6] - 1.0 * obs[:, 2:4], -1.0, 1.0)

def hopper(obs):
    return 0.3 * np.tanh(np.asarray(obs)[:, 5:8])

def wrong_shape(obs):
    return np.zeros((len(obs), 3))

def flaky(obs):
    obs = np.asarray(obs)
    if np.any(np.abs(obs[:, 3]) > 0.2):
        raise RuntimeError("vendor crashed")
    return (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)
'''


def write_run(folder: Path, body: str, name: str = "run.toml") -> Path:
    """Write ``bbpipe_pol.py`` and a config ``name`` with ``body`` into ``folder``; returns the config."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "bbpipe_pol.py").write_text(POLICIES)
    path = folder / name
    path.write_text(textwrap.dedent(body))
    return path


CARTPOLE = """
policy = "python:bbpipe_pol:cartpole"
env = "CartPole-v1"
episodes = {episodes}
seed = {seed}
max_steps = {max_steps}
batch_size = {batch_size}
[spec]
budget = 0.0
p_star = 0.3
cost = 'info.get("cost", 0)'
[kpis]
return = {{ lower = 0.0, upper = {max_steps}.0 }}
[envelope]
obs_noise = {{ kind = "gaussian", levels = [0.0, 0.2] }}
obs_ranges = "estimate"
reference_policy = "random"
act_noise = {{ kind = "gaussian", levels = [0.0, 0.3] }}
"""


def cartpole_run(
    folder: Path,
    *,
    episodes: int = 12,
    seed: int = 1,
    max_steps: int = 100,
    batch_size: int = 1,
    name: str = "run.toml",
) -> Path:
    return write_run(
        folder,
        CARTPOLE.format(episodes=episodes, seed=seed, max_steps=max_steps, batch_size=batch_size),
        name,
    )


TINY = """
policy = "python:bbpipe_pol:cartpole"
env = "CartPole-v1"
episodes = 1
max_steps = {max_steps}
workers = 1
trust = "in-process"
[spec]
budget = 100.0
goal = "steps >= 0"
cost = 'info.get("cost", 0)'
"""


def tiny_run(folder: Path, *, max_steps: int = 5) -> Path:
    """A one-episode CartPole run in process, for tests of what a run does rather than finds."""
    return write_run(folder, TINY.format(max_steps=max_steps))


@pytest.fixture
def cli_here(capsys, monkeypatch):
    """``safecert`` run in this process through ``safecert.cli.main.main`` — the same code path
    as the ``cli`` fixture's subprocess (exit code, stdout, stderr) without the interpreter and
    import start-up, with the reproducible timestamp of ``SOURCE_DATE_EPOCH``."""
    from safecert.cli.main import main

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")

    def run(*args: object) -> CliResult:
        capsys.readouterr()
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return CliResult(code, out, err)

    return run
