"""Counterexample trajectories: the worst failing episodes replayed step by step.

Independent check: the per-step costs the recorder evaluates sum to the stored episode's cost,
the number of steps and the outcome equal the stored record, and the report embeds one plot per
replayed counterexample, worst first.
"""

from __future__ import annotations

import numpy as np
import pytest

from safecert.api import certify_blackbox as certify  # writes the report too
from safecert.blackbox.plan import plan_run
from safecert.blackbox.store import EpisodeStore
from safecert.certificate import read_certificate
from safecert.report.render import MAX_TRAJECTORIES, failing_episodes
from safecert.report.trajectory import replay_trajectory
from tests.blackbox.pipeline_helpers import write_run
from tests.report.browser import dump_dom, needs_chromium

CONFIG = """
policy = "python:bbpipe_pol:cartpole"
env = "CartPole-v1"
episodes = 8
max_steps = 50
[spec]
budget = 4.0
cost = 'obs[2] > 0.04 or obs[2] < -0.04'
p_star = 0.5
[envelope]
act_noise = { kind = "uniform", levels = [0.0, 0.6] }
delay = { levels = [0, 2] }
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("traj")
    config = write_run(folder, CONFIG)
    certify(config, folder / "out", workers=1, progress=False)
    return folder


def test_replayed_costs_and_steps_equal_the_stored_episode(run):
    cert = read_certificate(run / "out" / "certificate.json")
    with EpisodeStore(run / "out" / "episodes.sqlite") as store:
        worst = failing_episodes(cert, store.records())
    assert worst and any(r.cost > 0 for r in worst)
    plan = plan_run(run / "run.toml")
    for record in worst[:MAX_TRAJECTORIES]:
        t = replay_trajectory(plan, record, None)
        assert t.matches
        assert len(t.costs) == record.steps and t.obs.shape == (record.steps + 1, 4)
        assert float(np.sum(t.costs)) == pytest.approx(record.cost)
        # the cost is the spec's: a step costs 1 exactly when |pole angle| > 0.04
        assert np.array_equal(t.costs, (np.abs(t.obs[1:, 2]) > 0.04).astype(float))


@needs_chromium
def test_report_embeds_the_worst_trajectories_in_order(run):
    cert = read_certificate(run / "out" / "certificate.json")
    with EpisodeStore(run / "out" / "episodes.sqlite") as store:
        worst = failing_episodes(cert, store.records())[:MAX_TRAJECTORIES]
    dom = dump_dom(run / "out" / "report.html")
    figures = dom.find_all("figure", data_trajectory=True)
    assert [f.attrs["data-trajectory"] for f in figures] == [f"{r.cell}:{r.index}" for r in worst]
    assert all(f.attrs["data-matches"] == "true" for f in figures)
    assert all(f.find_all("img")[0].attrs["src"].startswith("data:image/png") for f in figures)
    for r in worst:
        assert (run / "out" / f"trajectory_{r.cell}_{r.index}.png").is_file()


@needs_chromium
def test_a_non_mujoco_report_says_why_there_is_no_clip(run):
    dom = dump_dom(run / "out" / "report.html")
    assert "not a MuJoCo environment" in dom.find_all("p", id="no-clip")[0].text
    assert not dom.find_all("figure", data_clip=True)


@pytest.mark.slow
def test_mujoco_counterexample_clip_with_offscreen_egl(tmp_path):
    """The fast HalfCheetah vendor, certified by the real command with MUJOCO_GL=egl."""
    import os
    import re

    from PIL import Image

    from tests.conftest import REPO, run_cli

    examples = REPO / "examples"
    text = (examples / "cheetah_onnx_fast.toml").read_text()
    text = text.replace('"onnx:vendors/', f'"onnx:{examples}/vendors/')
    text = re.sub(r"(?m)^episodes = \d+", "episodes = 3", text)
    (tmp_path / "run.toml").write_text(text)
    env = {**os.environ, "MUJOCO_GL": "egl"}
    done = run_cli("certify", str(tmp_path / "run.toml"), "--out", str(tmp_path / "out"), env=env)
    if "no-clip" in (tmp_path / "out" / "report.html").read_text():
        pytest.skip("EGL offscreen rendering is not available on this machine")
    assert done.code == 1, done.stderr  # the fast vendor fails
    gifs = list((tmp_path / "out").glob("clip_*.gif"))
    assert len(gifs) == 1
    with Image.open(gifs[0]) as gif:
        # Pillow merges identical consecutive frames: 30+ frames means the robot stays in view
        assert 30 <= gif.n_frames <= 41 and gif.size == (240, 160)
    assert "data:image/gif;base64," in (tmp_path / "out" / "report.html").read_text()


VENDOR = """
import json, sys
for line in sys.stdin:
    obs = json.loads(line)["observations"]
    print(json.dumps({"actions": [[int(o[2] + 0.5 * o[3] > 0)] for o in obs]}), flush=True)
"""


def test_an_external_vendor_is_not_called_by_the_report(tmp_path):
    import sys

    (tmp_path / "vendor.py").write_text(VENDOR)
    config = write_run(
        tmp_path,
        CONFIG.replace(
            'policy = "python:bbpipe_pol:cartpole"', f'policy = "exec:{sys.executable} vendor.py"'
        ),
    )
    certify(config, tmp_path / "out", workers=1, progress=False)
    html = (tmp_path / "out" / "report.html").read_text()
    assert "the policy is an external exec service, which a report does not call" in html
    assert not list((tmp_path / "out").glob("trajectory_*.png"))
