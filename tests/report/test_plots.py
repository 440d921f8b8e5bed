"""The plots a signer looks at: failure rate with its interval against each axis (one line per
level of the other axes) and every cell's cost and return against the budget."""

from __future__ import annotations

import re

import pytest

from safecert.api import certify_blackbox as certify
from safecert.blackbox.store import EpisodeStore
from safecert.certificate import read_certificate
from safecert.report.plots import axis_plots
from safecert.stats.binomial import cp_lower
from tests.blackbox.pipeline_helpers import write_run
from tests.report.test_sequential_report import SEQUENTIAL
from tests.report.test_views import CONFIG


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("plots")
    fixed = write_run(folder / "fixed", CONFIG.replace("episodes = 20", "episodes = 8"))
    certify(fixed, folder / "fixed" / "out", workers=1, progress=False)
    seq = write_run(folder / "seq", SEQUENTIAL)
    certify(seq, folder / "seq" / "out", workers=1, progress=False)
    return {"fixed": folder / "fixed" / "out", "seq": folder / "seq" / "out"}


@pytest.mark.parametrize("which", ["fixed", "seq"])
def test_each_axis_plot_shows_every_cell_once_with_its_interval(runs, which):
    cert = read_certificate(runs[which] / "certificate.json")
    res = cert.result
    plots = axis_plots(res)
    assert [p.axis for p in plots] == ["obs_noise", "act_noise", "delay"]
    for p in plots:
        assert len(p.lines) == 4  # 2 × 2 levels of the other two axes
        points = [pt for line in p.lines.values() for pt in line]
        assert sorted(pt.cell for pt in points) == list(range(len(res.cells)))
        for line in p.lines.values():
            assert [pt.level for pt in line] == sorted(pt.level for pt in line)
            assert (
                len(
                    {
                        tuple(sorted(res.cells[pt.cell].params.items() - {(p.axis, pt.level)}))
                        for pt in line
                    }
                )
                == 1
            )  # one line: the other axes fixed
        for pt in points:
            c = res.cells[pt.cell]
            assert pt.high == c.upper_bound and pt.low <= pt.rate <= pt.high
            if which == "seq":
                assert pt.rate == c.failures_used / c.episodes_used and pt.low == c.lower_bound
                assert "e-process" in p.bound
            else:
                assert pt.rate == c.failures / c.episodes
                assert pt.low == cp_lower(c.failures, c.episodes, res.delta_cell).value


def test_the_report_embeds_the_rate_and_distribution_plots(runs):
    out = runs["fixed"]
    html = (out / "report.html").read_text()
    names = re.findall(r"<figure data-plot='([a-z_]+)'>", html)
    assert names == ["rate_obs_noise", "rate_act_noise", "rate_delay", "distributions"]
    for name in names:
        assert (out / f"{name}.png").is_file()
    md = (out / "report.md").read_text()
    assert "![Failure rate against delay" in md and "(distributions.png)" in md
    assert "budget d" in html[html.index("data-plot='distributions'") :].split("</figure>")[0]
    with EpisodeStore(out / "episodes.sqlite", create=False) as store:
        assert {r.cell for r in store.records() if r.cell >= 0} >= set(range(8))
