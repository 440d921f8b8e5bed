"""The report: self-contained HTML with embedded ODD maps, Markdown, and a real browser render."""

from __future__ import annotations

import re

import numpy as np
import pytest

from safecert.api import certify_blackbox as certify  # writes the report too
from safecert.report.html import FAIL_COLOUR
from tests.blackbox.pipeline_helpers import write_run
from tests.report.browser import chromium, needs_chromium, screenshot

CONFIG = """
policy = "python:bbpipe_pol:cartpole"
env = "CartPole-v1"
episodes = 4
max_steps = 40
[spec]
budget = 0.0
cost = 'info.get("cost", 0)'
p_star = 0.5
[envelope]
obs_noise = { levels = [0.0, 0.3] }
act_noise = { kind = "uniform", levels = [0.0, 0.5] }
delay = { levels = [0, 3] }
obs_ranges = [[-4.8, 4.8], [-1.0, 1.0], [-0.42, 0.42], [-1.0, 1.0]]
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
    assert html.count("<img alt='Worst-case projection: ") == 3  # the PNG maps, embedded
    assert not re.search(r"""(src|href)\s*=\s*['"]?(https?:|//)""", html)  # nothing fetched
    for title in (
        "Every cell",
        "Performance and cost",
        "Counterexamples",
        "Observation ranges",
        "Trajectories of the",
    ):
        assert title in html
    assert "task UB" in html and "safety UB" in html and "unified UB" in html


def test_counterexamples_carry_seed_and_replay_command(run_dir):
    md = (run_dir / "report.md").read_text()
    rows = [line for line in md.splitlines() if "--replay" in line]
    assert rows, "the delayed / noisy cells should fail somewhere"
    assert all(
        "safecert certify" in r and re.search(r"\| \d+:\d+ \| [^|]+ \| \d+ \|", r) for r in rows
    )
    assert "![Worst-case projection: obs_noise × act_noise](odd_obs_noise_act_noise.png)" in md


@needs_chromium
def test_report_renders_in_a_headless_browser(run_dir, tmp_path):
    shot = screenshot(run_dir / "report.html", tmp_path / "shot.png", size="1200,1600")
    assert shot.stat().st_size > 10_000
    import matplotlib.image as mpimg

    img = mpimg.imread(shot)[..., :3]
    assert img.shape[0] >= 1000 and img.shape[1] >= 1000
    colours = np.unique((img.reshape(-1, 3) * 255).astype(np.uint8), axis=0)
    assert len(colours) > 50  # text, tables and heatmaps, not a blank page
    fail = np.array([int(FAIL_COLOUR[i : i + 2], 16) for i in (1, 3, 5)]) / 255
    red = np.all(np.abs(img - fail) < 0.03, axis=-1)
    assert red.sum() > 500  # FAIL cells of the embedded heatmaps / tables were painted


@needs_chromium
def test_report_prints_to_pdf_with_its_print_stylesheet(run_dir, tmp_path):
    html = (run_dir / "report.html").read_text()
    assert "@media print" in html and "print-color-adjust:exact" in html
    pdf = tmp_path / "report.pdf"
    chromium(
        ["--no-pdf-header-footer", f"--print-to-pdf={pdf}", (run_dir / "report.html").as_uri()]
    )
    data = pdf.read_bytes()
    assert data.startswith(b"%PDF") and len(re.findall(rb"/Type\s*/Page[^s]", data)) >= 2
