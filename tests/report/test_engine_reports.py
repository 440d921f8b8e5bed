"""Shield and BNN ``report.html``, written by the engines beside their certificates, read from
the DOM real headless Chromium builds.

Shield: the bundled 7 × 7 gridworld (paper Sec. V-A), synthesized at ε = 0.1 (PASS) and the full
shield certified without ε (BOUND). Reachability is checked against boolean matrix powers of
the permitted successor graph, fences against ``result.allowed``. BNN: the LDS cut off at once
(UNKNOWN, fast) and, marked slow, a SAFE run with its figure and counterexamples.
"""

from __future__ import annotations

import numpy as np
import pytest

from safecert.certificate import read_certificate
from safecert.report.shield import reachable_states
from tests.conftest import REPO
from tests.report.browser import dump_dom, needs_chromium

GRID = REPO / "examples" / "shield" / "grid.toml"
LOGS = REPO / "examples" / "shield" / "grid_logs.jsonl"


@pytest.fixture(scope="module")
def shields(tmp_path_factory):
    from safecert.api import certify_shield, synthesize_shield

    root = tmp_path_factory.mktemp("shields")
    synthesize_shield(GRID, LOGS, epsilon=0.1, out=root / "synth")
    certify_shield(GRID, LOGS, out=root / "full")
    return {"synth": root / "synth", "full": root / "full"}


def _model_and_allowed(folder):
    from safecert.shield.model import load_model
    from safecert.shield.report import allowed_from_json

    cert = read_certificate(folder / "certificate.json")
    model = load_model(folder / "model.toml")
    return cert, model, allowed_from_json(model, cert.result.allowed)


def _reach_by_matrix_powers(model, allowed, horizon):
    n = model.n_states
    step = np.zeros((n, n), dtype=int)
    for s in range(n):
        if model.unsafe[s]:
            continue
        for a in np.flatnonzero(allowed[s]):
            for s2 in model.successors(s, a):
                if 0 <= s2 < n:
                    step[s, s2] = 1
    reach = np.zeros(n, dtype=int)
    reach[model.initial] = 1
    for _ in range(horizon):
        reach = np.minimum(1, reach + reach @ step)
    return reach.astype(bool)


@pytest.mark.parametrize("which", ["synth", "full"])
def test_reachable_states_match_matrix_powers(shields, which):
    cert, model, allowed = _model_and_allowed(shields[which])
    mine = reachable_states(model, allowed, cert.result.horizon)
    assert np.array_equal(mine, _reach_by_matrix_powers(model, allowed, cert.result.horizon))
    if which == "full":
        assert (mine & model.unsafe).any()  # without a shield the hazards are reachable


@needs_chromium
@pytest.mark.parametrize("which", ["synth", "full"])
def test_shield_report_map_legend_fences_and_tables(shields, which):
    folder = shields[which]
    cert, model, allowed = _model_and_allowed(folder)
    assert cert.verdict == ("PASS" if which == "synth" else "BOUND")
    dom = dump_dom(folder / "report.html")
    assert dom.find_all("p", id="shield-legend")
    assert dom.find_all("div", data_verdict=cert.verdict)
    reach = reachable_states(model, allowed, cert.result.horizon)
    squares = dom.find_all("td", data_state=True)
    assert len(squares) == model.n_states
    sides = {(-1, 0): "top", (1, 0): "bottom", (0, -1): "left", (0, 1): "right"}
    for sq in squares:
        s = model.labels.index(sq.attrs["data-state"])
        assert sq.attrs["data-reachable"] == str(bool(reach[s])).lower()
        assert sq.attrs["data-kind"] == ("unsafe" if model.unsafe[s] else "live")
        want = {
            sides[tuple(move)]
            for name, move in model.spec.layout.moves.items()
            if name not in cert.result.allowed.get(model.labels[s], [])
        }
        assert set(filter(None, sq.attrs["data-fences"].split(","))) == want
    short = dom.find_all("table", id="short-rows")[0].find_all("tbody")[0].find_all("tr")
    assert len(short) == sum(r.vacuous for r in cert.result.rows)
    rows = dom.find_all("table", id="per-state")[0].find_all("tbody")[0].find_all("tr")
    assert len(rows) == int(model.live.sum())
    for row in rows:
        label, value = (td.text for td in row.find_all("td")[:2])
        assert float(value) == pytest.approx(cert.result.values[label], abs=5e-6)
    facts = {r.attrs["data-fact"] for r in dom.find_all("tr", data_fact=True)}
    assert {"engine", "verdict", "claim", "signature", "seed", "parameters.epsilon"} <= facts
    assert "digest:model:" + str(cert.inputs.files[0].path) in facts
    note = dom.find_all("p", id="reach-note")[0].text
    assert ("Unsafe states reachable" in note) == bool((reach & model.unsafe).any())


@pytest.fixture(scope="module")
def bnn_unknown(tmp_path_factory):
    from safecert.bnn.certify import certify_run
    from safecert.bnn.setup import benchmark_config

    cfg = benchmark_config(
        "lds_x04",
        epsilon="1sigma",
        data={"bootstrap": False, "initial_samples": 50, "unsafe_samples": 50},
        learner={"epochs": 1},
        limits={"per_epsilon_s": 0.001},
    )
    from safecert.report import write_run_report

    path = certify_run(cfg, None, tmp_path_factory.mktemp("bnn_unknown") / "out").path
    write_run_report(path)
    return path


@needs_chromium
def test_bnn_report_of_an_unknown_run_states_why_there_is_no_figure(bnn_unknown):
    cert = read_certificate(bnn_unknown)
    assert cert.verdict == "UNKNOWN"
    dom = dump_dom(bnn_unknown.parent / "report.html")
    assert dom.find_all("div", data_verdict="UNKNOWN")
    assert "Nothing is claimed" in dom.find_all("p", id="claim")[0].text
    search = dom.find_all("table", id="search")[0].find_all("tbody")[0].find_all("tr")
    assert len(search) == len(cert.result.search)
    if cert.result.invariant is None:
        assert "no invariant" in dom.find_all("p", id="no-figure")[0].text
    sets = dom.find_all("ul", id="sets")[0].text
    assert "X0" in sets and "Xu" in sets and "outside" in sets


@pytest.mark.slow
@needs_chromium
def test_bnn_report_of_a_safe_run_embeds_the_figure_and_counterexamples(tmp_path):
    import shutil

    from tests.bnn.conftest import EXAMPLE, FAST
    from tests.conftest import run_cli

    shutil.copyfile(EXAMPLE / "lds.npz", tmp_path / "lds.npz")
    (tmp_path / "run.toml").write_text(FAST)
    done = run_cli("bnn", "verify", str(tmp_path / "run.toml"), "--out", str(tmp_path / "out"))
    cert = read_certificate(tmp_path / "out" / "certificate.json")
    assert done.code == 0 and cert.verdict == "SAFE"
    dom = dump_dom(tmp_path / "out" / "report.html")
    imgs = dom.find_all("img")
    assert imgs and imgs[0].attrs["src"].startswith("data:image/png;base64,")
    checks = dom.find_all("table", id="checks")[0].find_all("tbody")[0].find_all("tr")
    assert [r.find_all("td")[2].text for r in checks] == ["PASS"] * 3
    rows = dom.find_all("table", id="counterexamples")[0].find_all("tbody")[0].find_all("tr")
    assert len(rows) == len(cert.result.counterexamples)


@needs_chromium
def test_an_unknown_bnn_run_never_shows_its_candidate_as_an_invariant(bnn_unknown, tmp_path):
    """The figure of an UNKNOWN run is the last candidate: said so above it and in its legend;
    a reason naming a condition the table shows with a counterexample is explained; the
    counterexamples' title does not claim the final candidate excludes them."""
    import shutil

    from safecert.bnn.result import CounterexampleOutcome, StateTransition
    from safecert.report.bnn import render_bnn_report

    cert = read_certificate(bnn_unknown)
    cex = CounterexampleOutcome(counterexample=StateTransition(x=[0.1, 0.2], x_next=[0.3, 0.4]))
    r = cert.result
    cert = cert.model_copy(
        update={
            "result": r.model_copy(
                update={
                    "reason": "closure: timeout",
                    "checks": r.checks.model_copy(update={"closure": cex}),
                }
            )
        }
    )
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copyfile(bnn_unknown, folder / "certificate.json")
    shutil.copyfile(REPO / "docs" / "screenshots" / "bnn_lds.png", folder / "invariant.png")
    (folder / "report.html").write_text(render_bnn_report(cert, folder / "certificate.json"))
    dom = dump_dom(folder / "report.html")
    assert "Not certified" in dom.find_all("div", id="candidate-warning")[0].text
    legend = dom.find_all("ul", id="figure-legend")[0]
    assert legend.attrs["data-proved"] == "false" and "NOT an invariant" in legend.text
    assert "counterexample" in legend.text and "X0" in legend.text and "Xu" in legend.text
    assert "not proved" in dom.find_all("img")[0].attrs["alt"]
    note = dom.find_all("p", id="reason-note")[0].text
    assert "closure: timeout" in note and "last answer the verifier completed" in note
    title = next(h.text for h in dom.find_all("h2") if h.text.startswith("Counterexamples"))
    assert "excludes each" not in title and "not certified" in title
