"""A sequential report never overstates: it names the e-process bound it shows, shows each
decision's own counts (not the episodes run after it), says INCONCLUSIVE as the terminal does,
and the console summary carries the same counts and bounds.

The run: CartPole over obs_noise × act_noise × delay with a ``[sequential]`` table and a cap of
40 episodes per cell; the noisiest corner FAILs after 9 episodes (all it stores), three cells
reach the cap undecided (INCONCLUSIVE).
"""

from __future__ import annotations

import io
import re

import pytest

from safecert.api import certify_blackbox as certify  # writes the report too
from safecert.certificate import read_certificate
from safecert.cli.output import Console
from tests.blackbox.pipeline_helpers import write_run
from tests.report.browser import dump_dom, needs_chromium
from tests.report.test_views import CONFIG

SEQUENTIAL = CONFIG.replace("episodes = 20", "episodes = 40") + "\n[sequential]\n"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sequential")
    config = write_run(folder, SEQUENTIAL)
    certify(config, folder / "out", workers=1, progress=False)
    return folder / "out"


def test_the_run_has_a_cell_decided_before_its_last_stored_episode(run):
    cert = read_certificate(run / "certificate.json")
    assert cert.kind == "sequential"
    decided_early = [c for c in cert.result.cells if c.episodes_used < 40]
    assert any(c.decision == "FAIL" for c in decided_early)
    assert any(c.decision == "INCONCLUSIVE" for c in cert.result.cells)


@needs_chromium
def test_squares_and_table_show_each_decisions_own_counts_and_e_process_bounds(run):
    cert = read_certificate(run / "certificate.json")
    dom = dump_dom(run / "report.html")
    text = dom.find_all("body")[0].text
    assert "Clopper" not in text  # no fixed-N bound is named or shown as the decision's
    legend = dom.find_all("p", **{"class": "legend"})[0].text
    assert "e-process" in legend and "INCONCLUSIVE" in legend
    for sq in dom.find_all("td", data_cells=True):
        if "," in sq.attrs["data-cells"]:
            continue
        c = cert.result.cells[int(sq.attrs["data-cells"])]
        want = (
            "NOT CERTIFIED"
            if c.decision == "PASS" and sq.attrs["data-status"] == "warn"
            else c.decision
        )
        assert sq.text.startswith(f"{want} {c.failures_used}/{c.episodes_used} "), sq.text
        assert f"LB\xa0{c.lower_bound:.3f} UB\xa0{c.upper_bound:.3f}" in sq.text
    heading = next(h for h in dom.find_all("h2") if h.text.startswith("Every cell"))
    assert "e-process" in heading.text and "not stored" in heading.text
    table = next(t for t in dom.find_all("table") if "sortable" in t.attrs.get("class", ""))
    head = [th.text for th in table.find_all("th")]
    rows = [[td.text for td in tr.find_all("td")] for tr in table.find_all("tr", data_status=True)]
    col = {name: head.index(name) for name in head}
    assert "task UB" not in head and "safety UB" not in head and "episodes stored" not in head
    for row, c in zip(rows, cert.result.cells, strict=True):
        assert int(row[col["episodes at decision"]]) == c.episodes_used
        assert int(row[col["failures at decision"]]) == c.failures_used
        assert float(row[col["e-process UB"]]) == pytest.approx(c.upper_bound, abs=1e-4)
        assert float(row[col["e-process LB"]]) == pytest.approx(c.lower_bound, abs=1e-4)
        assert c.episodes == c.episodes_used  # the store holds exactly the decision's episodes
        status = row[col["status"]]
        assert status != "NOT CERTIFIED" or c.decision == "PASS"
        if c.decision == "INCONCLUSIVE":
            assert status == "INCONCLUSIVE"


def test_the_console_summary_shows_the_decisions_counts_and_bounds(run, monkeypatch):
    from safecert.cli import blackbox

    cert = read_certificate(run / "certificate.json")
    out = io.StringIO()
    monkeypatch.setattr(blackbox, "console", Console(file=out))
    blackbox._verdict_table(cert)
    text = out.getvalue()
    assert "N at decision" in text and "e-process UB" in text
    failing = next(c for c in cert.result.cells if c.decision == "FAIL")
    row = next(line for line in text.splitlines() if "FAIL" in line and "│" in line)
    numbers = re.findall(r"[0-9.]+", row.split("│", 3)[3])  # after cell and params
    assert numbers[:2] == [str(failing.episodes_used), str(failing.failures_used)]
    assert float(numbers[2]) == pytest.approx(failing.lower_bound, abs=1e-4)
    assert float(numbers[3]) == pytest.approx(failing.upper_bound, abs=1e-4)
    assert numbers[-1] == str(failing.episodes) == numbers[0]  # the store: the decisive prefix
    s1 = cert.result.stage1
    assert (
        f"stage 1 (nominal): {s1.decision} ({s1.failures_used}/{s1.episodes_used} at the " in text
    )


def test_the_rejudge_summary_is_titled_rejudge(monkeypatch, tmp_path):
    from safecert.cli import blackbox

    folder = tmp_path / "fixed"
    config = write_run(folder, CONFIG.replace("episodes = 20", "episodes = 4"))
    certify(config, folder / "out", workers=1, progress=False, report=False)
    from safecert.cli.main import main

    out = io.StringIO()
    monkeypatch.setattr(blackbox, "console", Console(file=out))
    main(["rejudge", str(folder / "out"), "--budget", "6", "--p-star", "0.9"])
    text = out.getvalue()
    assert "safecert rejudge (post hoc): p* = 0.9" in text and "safecert certify" not in text


def test_the_console_summary_names_out_of_space_actions(run, monkeypatch):
    from safecert.blackbox.result import FailureKind
    from safecert.cli import blackbox

    cert = read_certificate(run / "certificate.json")
    out = io.StringIO()
    monkeypatch.setattr(blackbox, "console", Console(file=out))
    blackbox._verdict_table(cert)
    assert "out-of-space" not in out.getvalue()
    r = cert.result
    kinds = {"action_out_of_space": FailureKind(count=3, example="action 7 not in Discrete(2)")}
    failures = r.oracle_failures.model_copy(update={"total": 3, "kinds": kinds})
    cert = cert.model_copy(update={"result": r.model_copy(update={"oracle_failures": failures})})
    out = io.StringIO()
    monkeypatch.setattr(blackbox, "console", Console(file=out))
    blackbox._verdict_table(cert)
    text = out.getvalue()
    assert "failed episodes: 3/" in text and "ended by an action outside the action space" in text
    assert "action 7 not in Discrete(2)" in text
    assert f"action_out_of_space = {r.action_out_of_space}" in text
