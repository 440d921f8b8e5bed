"""The pipeline on the built-in cost tasks: real MuJoCo episodes, point-task layouts, L∞ adversary,
and an HTTP policy whose health probe fails before any episode runs."""

from __future__ import annotations

import socket

import pytest

from safecert.blackbox.certify import certify
from safecert.errors import OracleError
from tests.blackbox.pipeline_helpers import write_run

HOPPER = """
policy = "python:bbpipe_pol:hopper"
env = "SafeHopperVelocity-v0"
episodes = 3
max_steps = 25
batch_size = 2
[spec]
budget = 2.0
p_star = 0.5
[envelope]
dynamics = { mass = [1.0, 1.25] }
random_dynamics = { levels = [0.0, 0.25] }
obs_noise = { levels = [0.0, 0.05] }
obs_ranges = "estimate"
reference_policy = "random"
"""

POINT = """
policy = "python:bbpipe_pol:point_greedy"
env = "SafePointGoal-v0"
episodes = 4
max_steps = 60
batch_size = 2
[spec]
goal = "info:is_success"
budget = 0.0
p_star = 0.5
[envelope]
layout = {{ levels = [false, true] }}
obs_noise = {{ kind = "linf", levels = [0.0, 0.03] }}
act_noise = {{ kind = "{act}", levels = [0.0, 0.1] }}
[adversary]
candidates = 4
"""


def test_mujoco_hopper_with_mass_shift_random_dynamics_and_estimated_ranges(tmp_path):
    config = write_run(tmp_path, HOPPER)
    cert = certify(config, tmp_path / "out", workers=1, progress=False)
    cells = cert.result.cells
    assert len(cells) == 8 and all(c.episodes == 3 for c in cells)
    assert cert.result.obs_ranges.estimated == [True] * 11  # Hopper's Box is unbounded
    assert cert.result.obs_ranges.episodes == 10
    steps = {tuple(sorted(c.params.items())): c.return_kpi.mean for c in cells}
    assert len(set(steps.values())) > 1  # the shifts change the episodes


@pytest.mark.parametrize("act", ["linf", "uniform"])
def test_point_task_with_layouts_and_linf_adversary(tmp_path, act):
    config = write_run(tmp_path, POINT.format(act=act))
    cert = certify(config, tmp_path / "out", workers=1, progress=False)
    result = cert.result
    assert len(result.cells) == 8 and result.family_size == 8
    assert result.obs_ranges.estimated == [False] * 14  # the point task's space is bounded
    assert any(c.safety_failures > 0 for c in result.cells)  # the greedy policy hits hazards


def test_wrong_url_is_one_clear_error_before_any_episode(tmp_path):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens on this port now
    config = write_run(
        tmp_path,
        f"""
        policy = "http://127.0.0.1:{port}/act"
        env = "CartPole-v1"
        episodes = 5
        retries = 0
        timeout_s = 2.0
        """,
    )
    with pytest.raises(OracleError) as info:
        certify(config, tmp_path / "out", workers=1, progress=False)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "out" / "certificate.json").exists()
    from safecert.blackbox.store import EpisodeStore

    with EpisodeStore(tmp_path / "out" / "episodes.sqlite") as store:
        assert store.count() == 0
