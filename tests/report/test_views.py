"""ODD views that cannot hide a failure, the facts panel and the re-judged banner, read from the
DOM that real headless Chromium builds from ``report.html``.

The run: CartPole with a balancing policy over obs_noise × act_noise × delay (2 × 2 × 2, listed
out of order: obs_noise 0.3 before 0.0), 20 episodes per cell. Three cells fail, one of them the
(0.3, 0.5, 3) corner that a map at the other axes' nominal levels never shows.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from safecert.api import certify_blackbox as certify  # writes the report too
from safecert.blackbox.rejudge import rejudge
from safecert.certificate import read_certificate
from safecert.report import write_run_report
from safecert.report.facts import flatten
from safecert.report.odd import cell_views, odd_views
from tests.blackbox.pipeline_helpers import write_run
from tests.report.browser import dump_dom, needs_chromium

CONFIG = """
policy = "python:bbpipe_pol:cartpole"
env = "CartPole-v1"
episodes = 20
max_steps = 60
[spec]
budget = 0.0
cost = 'info.get("cost", 0)'
p_star = 0.5
[envelope]
obs_noise = { levels = [0.3, 0.0] }
act_noise = { kind = "uniform", levels = [0.0, 0.5] }
delay = { levels = [0, 3] }
obs_ranges = [[-4.8, 4.8], [-1.0, 1.0], [-0.42, 0.42], [-1.0, 1.0]]
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("views")
    config = write_run(folder, CONFIG)
    certify(config, folder / "out", workers=1, progress=False)
    return folder / "out"


@pytest.fixture(scope="module")
def rejudged(run):
    _, where = rejudge(run, budget=6.0, p_star=0.9)
    write_run_report(where / "certificate.json")
    return where


def failing(cert) -> set[int]:
    return {i for i, c in enumerate(cert.result.cells) if c.decision == "FAIL"}


def test_the_run_has_a_failing_cell_no_nominal_map_shows(run):
    cert = read_certificate(run / "certificate.json")
    assert cert.verdict == "FAIL"
    bad = [cert.result.cells[i].params for i in failing(cert)]
    assert {"obs_noise": 0.3, "act_noise": 0.5, "delay": 3} in bad  # a corner off every nominal
    assert len(bad) >= 2


def test_slices_cover_every_cell_once_and_projections_are_worst_case(run):
    cert = read_certificate(run / "certificate.json")
    slices, projections = odd_views(cert.result)
    assert len(slices) == 2 and len(projections) == 3
    covered = [c for m in slices for sq in m.squares.values() for c in sq.cells]
    assert sorted(covered) == list(range(len(cert.result.cells)))
    status = {v.index: v.status for v in cell_views(cert.result)}
    for m in projections:
        for sq in m.squares.values():
            assert len(sq.cells) == 2
            want = "fail" if any(status[c] == "fail" for c in sq.cells) else "pass"
            assert sq.status == want, (m.title, sq)
    for m in slices + projections:  # levels sorted by value, not config order
        assert m.x[1] == sorted(m.x[1]) and (m.y is None or m.y[1] == sorted(m.y[1]))


def test_a_passing_cell_is_not_green_when_the_nominal_cell_fails(run):
    cert = read_certificate(run / "certificate.json")
    res = cert.result
    broken = res.model_copy(update={"stage1": res.stage1.model_copy(update={"decision": "FAIL"})})
    views = cell_views(broken)
    assert all(v.status != "pass" for v in views)
    assert {v.status for v in views if v.decision == "PASS"} == {"warn"}
    assert {v.status for v in cell_views(res) if v.decision == "PASS"} == {"pass"}


@needs_chromium
def test_every_failing_cell_is_shown_failing_in_every_view_of_the_dom(run):
    cert = read_certificate(run / "certificate.json")
    bad = failing(cert)
    dom = dump_dom(run / "report.html")
    squares = dom.find_all("td", data_cells=True)
    assert squares
    for view in ("slice", "worst-case"):
        in_view = [sq for sq in squares if sq.ancestor("table").attrs.get("data-view") == view]
        seen = set()
        for sq in in_view:
            cells = {int(c) for c in sq.attrs["data-cells"].split(",")}
            seen |= cells
            expected = "fail" if cells & bad else "pass"
            assert sq.attrs["data-status"] == expected, (view, cells, sq.text)
            assert ("FAIL" in sq.text) == (expected == "fail")
        assert seen == set(range(len(cert.result.cells))), view
    # every slice square is one cell; the slices show each failing cell exactly once, failing
    slice_fail = [
        int(sq.attrs["data-cells"])
        for sq in squares
        if sq.ancestor("table").attrs["data-view"] == "slice" and sq.attrs["data-status"] == "fail"
    ]
    assert sorted(slice_fail) == sorted(bad)
    # the sortable table of every cell
    table = next(t for t in dom.find_all("table") if "sortable" in t.attrs.get("class", ""))
    rows = table.find_all("tr", data_status=True)
    assert len(rows) == len(cert.result.cells)
    assert sorted(i for i, r in enumerate(rows) if r.attrs["data-status"] == "fail") == sorted(bad)
    # axes sorted by value in every heatmap header
    for t in dom.find_all("table", data_view=True):
        heads = [th.text for th in t.find_all("th")][1:]
        numbers = [float(h) for h in heads if re.fullmatch(r"-?[0-9.]+", h)]
        xs = numbers[: len(numbers)]  # column headers come first and are the x levels
        assert xs[:2] == sorted(xs[:2])


@needs_chromium
def test_the_facts_panel_holds_every_field(run):
    cert = read_certificate(run / "certificate.json")
    dom = dump_dom(run / "report.html")
    facts = {
        r.attrs["data-fact"]: r.find_all("td")[0].text for r in dom.find_all("tr", data_fact=True)
    }
    required = {
        "engine": "blackbox",
        "verdict": "FAIL",
        "signature": "unsigned",
        "safecert_version": cert.safecert_version,
        "created_utc": cert.created_utc,
        "seed": "0",
        "family_size": "8",
    }
    for key, value in required.items():
        assert facts[key] == value, key
    assert "p* = 0.5" in facts["claim"]
    assert float(facts["delta_cell"]) == pytest.approx(cert.result.delta_cell, rel=1e-5)
    for entry in [*cert.inputs.files, *cert.inputs.evidence]:
        assert entry.sha256 in facts[f"digest:{entry.role}:{entry.path}"]
    for path, value in flatten(cert.parameters):
        shown = facts[f"parameters.{path}"]
        assert shown == (value if isinstance(value, str) else json.dumps(value, sort_keys=True))
    assert "noise kind gaussian" in facts["axis:obs_noise"]
    assert "noise kind uniform" in facts["axis:act_noise"]
    assert "levels 0.0, 0.3" in facts["axis:obs_noise"]
    assert "derived" in facts["range:cost"] and "none" in facts["range:return"]
    assert "dim 1: [-1, 1] declared" in facts["range:obs"]
    assert not dom.find_all("div", id="posthoc")


@needs_chromium
def test_a_rejudged_report_carries_its_banner_and_replays_against_the_store(run, rejudged):
    cert = read_certificate(rejudged / "certificate.json")
    dom = dump_dom(rejudged / "report.html")
    banner = dom.find_all("div", id="posthoc")
    assert len(banner) == 1
    cells = [td.text for td in banner[0].find_all("td")]
    assert cells == ["budget d", "0", "6", "p*", "0.5", "0.9"]
    badge = dom.find_all("div", data_verdict=cert.verdict)[0]
    assert "re-judged post hoc" in badge.text
    assert "re-judged" in dom.find_all("title")[0].text
    md = (rejudged / "report.md").read_text()
    replays = re.findall(r"--out (\S+)`", md)
    assert replays and {Path(p) for p in replays} == {run.resolve()}
    assert (Path(replays[0]) / "episodes.sqlite").is_file()


def test_signature_status_names_the_signer(run, tmp_path):
    from safecert.blackbox.store import EpisodeStore
    from safecert.report import write_report
    from safecert.report.facts import signature_status
    from safecert.signing import fingerprint, generate_keypair, load_public_key, sign_file

    key, pub = generate_keypair(tmp_path / "keys")
    assert signature_status(run / "certificate.json") == "unsigned"
    sig = sign_file(run / "certificate.json", key)
    try:
        text = signature_status(run / "certificate.json")
        assert text.startswith(f"signed by {fingerprint(load_public_key(pub))} (not checked")
        cert = read_certificate(run / "certificate.json")
        with EpisodeStore(run / "episodes.sqlite") as store:
            write_report(cert, store.records(), tmp_path / "copy")
        (tmp_path / "copy" / "certificate.json").write_bytes(b"{}")
        sig.rename(tmp_path / "copy" / "certificate.json.sig")
        assert "covers other bytes" in signature_status(tmp_path / "copy" / "certificate.json")
    finally:
        sig.unlink(missing_ok=True)


def test_counterexamples_are_worst_first_and_their_replay_command_works(run, rejudged):
    from safecert.blackbox.store import EpisodeStore
    from tests.conftest import run_cli

    cert = read_certificate(run / "certificate.json")
    bad = failing(cert)
    md = (rejudged / "report.md").read_text()
    rows = [line.split(" | ") for line in md.splitlines() if "--replay" in line]
    ids = [tuple(int(x) for x in r[0].strip("| ").split(":")) for r in rows]
    with EpisodeStore(run / "episodes.sqlite") as store:
        records = {(r.cell, r.index): r for r in store.records()}
    in_bad = [cell in bad for cell, _ in ids]
    assert in_bad == sorted(in_bad, reverse=True)  # failing cells' episodes first
    keys = [(records[i].cost, -records[i].steps) for i, b in zip(ids, in_bad, strict=True) if b]
    assert keys == sorted(keys, reverse=True)  # highest cost, then earliest end
    command = re.search(r"`safecert (certify .*)`", " | ".join(rows[0])).group(1)
    done = run_cli(*shlex.split(command), "--json", timeout=300)
    assert done.code == 0, done.stderr
    assert done.json()["matches_stored"] is True
