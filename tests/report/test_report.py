"""The report: self-contained HTML with embedded ODD maps, Markdown, and a real browser render."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from safecert.blackbox.certify import certify
from tests.blackbox.pipeline_helpers import write_run

CHROMIUM = Path("/usr/bin/chromium")

CONFIG = """
policy = "python:bbpipe_pol:cartpole"
env = "CartPole-v1"
episodes = 4
max_steps = 40
[spec]
budget = 0.0
p_star = 0.5
[envelope]
obs_noise = { levels = [0.0, 0.3] }
act_noise = { kind = "uniform", levels = [0.0, 0.5] }
delay = { levels = [0, 3] }
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("report")
    config = write_run(folder, CONFIG)
    certify(config, folder / "out", workers=1, progress=False)
    return folder / "out"


def test_one_heatmap_per_pair_of_axes_embedded_in_a_self_contained_html(run_dir):
    pngs = sorted(p.name for p in run_dir.glob("odd_*.png"))
    assert pngs == [
        "odd_act_noise_delay.png",
        "odd_obs_noise_act_noise.png",
        "odd_obs_noise_delay.png",
    ]
    html = (run_dir / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 3
    assert not re.search(r"""(src|href)\s*=\s*['"]?(https?:|//)""", html)  # nothing fetched
    for title in (
        "Reliability per cell",
        "Performance and cost",
        "Counterexamples",
        "Observation ranges",
    ):
        assert title in html
    assert "task UB" in html and "safety UB" in html and "unified UB" in html


def test_counterexamples_carry_seed_and_replay_command(run_dir):
    md = (run_dir / "report.md").read_text()
    rows = [line for line in md.splitlines() if "--replay" in line]
    assert rows, "the delayed / noisy cells should fail somewhere"
    assert all("safecert certify" in r and re.search(r"\| \d+:\d+ \| \d+ \|", r) for r in rows)
    assert "![ODD: obs_noise × act_noise](odd_obs_noise_act_noise.png)" in md


@pytest.mark.skipif(
    not CHROMIUM.exists(), reason="/usr/bin/chromium is absent (apt-get install -y chromium)"
)
def test_report_renders_in_a_headless_browser(run_dir, tmp_path):
    shot = tmp_path / "shot.png"
    cmd = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--window-size=1200,1600",
        f"--screenshot={shot}",
        (run_dir / "report.html").resolve().as_uri(),
    ]
    subprocess.run(cmd, capture_output=True, timeout=180, env={**os.environ, "HOME": str(tmp_path)})
    assert shot.is_file() and shot.stat().st_size > 10_000
    import matplotlib.image as mpimg

    img = mpimg.imread(shot)[..., :3]
    assert img.shape[0] >= 1000 and img.shape[1] >= 1000
    colours = np.unique((img.reshape(-1, 3) * 255).astype(np.uint8), axis=0)
    assert len(colours) > 50  # text, tables and heatmaps, not a blank page
    red = np.all(np.abs(img - np.array([0xD6, 0x45, 0x3D]) / 255) < 0.03, axis=-1)
    assert red.sum() > 500  # FAIL cells of the embedded heatmaps / tables were painted
    shutil.rmtree(tmp_path / "profile", ignore_errors=True)
