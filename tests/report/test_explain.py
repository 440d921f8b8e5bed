"""Wide bounds are explained beside them, trajectories plot the constrained quantity with its
threshold, captions appear once, ODD PNGs run the way the HTML maps do, and range sources are
named as what they are."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from safecert.api import certify_blackbox as certify
from safecert.blackbox.result import Kpi
from safecert.certificate import read_certificate
from safecert.report.odd import odd_views, projection_figure
from safecert.report.render import bound_note, episodes_for_margin
from safecert.report.trajectory import Trajectory, crossing_step, trajectory_png
from tests.blackbox.pipeline_helpers import write_run
from tests.report.test_views import CONFIG


def _radius(n: int, delta: float, span: float) -> float:  # Hoeffding (1963), one-sided
    return span * math.sqrt(math.log(1 / delta) / (2 * n))


def test_the_demos_cost_ucb_is_explained_against_its_budget():
    delta = 0.1 / 9
    mean = 0.5
    kpi = Kpi(
        mean=mean,
        range=[0.0, 250.0],
        side="upper",
        bound=mean + _radius(60, delta, 250),
        outside_range=False,
    )
    note = bound_note(kpi, 60, delta, budget=5.0)
    margin = float(re.search(r"margin of ([0-9]+\.?[0-9]*)", note).group(1))
    assert margin == pytest.approx(_radius(60, delta, 250), rel=1e-3)
    narrowed = float(re.search(r"narrow it to ([0-9]+\.?[0-9]*)", note).group(1))
    assert narrowed == pytest.approx(_radius(240, delta, 250), rel=1e-3)
    assert "N = 60 episodes over a range of 250" in note and "d = 5" in note
    need = int(re.search(r"N ≥ (\d+)", note).group(1))
    assert _radius(need, delta, 250) <= 5.0 - mean < _radius(need - 1, delta, 250)
    assert episodes_for_margin(4.5, delta, 250) == need
    narrow = Kpi(mean=1.0, range=[0.0, 2.0], side="upper", bound=1.05, outside_range=False)
    assert bound_note(narrow, 10_000, delta, budget=5.0) == ""
    assert "no bound is claimed" in bound_note(
        Kpi(mean=1.0, range=[0.0, 2.0], side="upper", bound=None, outside_range=True), 5, delta
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("explain")
    config = write_run(folder, CONFIG.replace("episodes = 20", "episodes = 6"))
    certify(config, folder / "out", workers=1, progress=False)
    return folder / "out"


def test_the_report_explains_each_wide_cost_bound(run):
    cert = read_certificate(run / "certificate.json")
    md = (run / "report.md").read_text()
    head = next(line for line in md.splitlines() if line.startswith("| cell | params | return"))
    assert head.endswith("| why so wide |")
    rows = [line for line in md.splitlines() if line.startswith("| ") and "cost: " in line]
    assert len(rows) == len(cert.result.cells) + 1  # stage 1 too; budget 0: every UCB > d
    assert rows[0].startswith("| stage 1 | ") and "(nominal)" in rows[0]
    c = cert.result.stage1
    span = c.cost_kpi.range[1] - c.cost_kpi.range[0]
    assert f"N = {c.episodes} episodes over a range of {span:g}" in rows[0]


def test_observation_ranges_name_their_source(run):
    md = (run / "report.md").read_text()
    assert "space bounds" not in md
    table = md[md.index("## Observation ranges") :].split("\n\n")[0]
    assert "declared in the config" in table


def test_a_trajectory_plots_cumulative_cost_against_the_budget_once_captioned(run):
    costs = np.array([0.0, 1.0, 0.0, 2.0, 1.0])
    assert crossing_step(costs, 2.5) == 4 and crossing_step(costs, 10.0) is None
    html = (run / "report.html").read_text()
    figures = re.findall(r"<figure data-trajectory=.*?</figure>", html)
    assert figures
    for fig in figures:
        caption = re.search(r"<figcaption>(.*?)</figcaption>", fig).group(1)
        assert html.count(caption) == 1


def test_the_trajectory_figure_puts_the_constrained_quantity_first(monkeypatch):
    import matplotlib.pyplot as plt

    shown = {}
    real = plt.Figure.savefig

    def keep(fig, *args, **kwargs):
        top = fig.axes[0]
        shown["labels"] = [line.get_label() for line in top.get_lines()]
        shown["budget"] = [
            line.get_ydata()[0] for line in top.get_lines() if "budget" in line.get_label()
        ]
        shown["suptitle"] = fig._suptitle
        return real(fig, *args, **kwargs)

    monkeypatch.setattr(plt.Figure, "savefig", keep)
    t = Trajectory(np.zeros((6, 17)), np.array([0.0, 1.0, 0.0, 2.0, 1.0]), None, None, [])
    assert trajectory_png(t, 2.5).startswith(b"\x89PNG")
    assert shown["labels"][0] == "cumulative cost" and shown["budget"] == [2.5]
    assert "exceeds d at step 4" in shown["labels"]
    assert shown["suptitle"] is None


def test_odd_pngs_run_top_to_bottom_like_the_html_maps(run):
    import matplotlib.pyplot as plt

    cert = read_certificate(run / "certificate.json")
    _, projections = odd_views(cert.result)
    for m in projections:
        fig = projection_figure(m, cert.result.p_star)
        ax = fig.axes[0]
        first, second = (ax.transData.transform((0, y))[1] for y in (0.5, 1.5))
        assert first > second  # the smallest level is drawn on top (display y grows upward)
        labels = [t.get_text() for t in ax.get_yticklabels()]
        assert labels == [str(v) for v in m.y[1]] and m.y[1] == sorted(m.y[1])
        plt.close(fig)
