"""``safecert report RUNS_DIR``: the static index over a folder of real certificates, read from
the DOM headless Chromium builds; links are relative and resolve."""

from __future__ import annotations

from pathlib import Path

import pytest

from safecert.api import certify_blackbox as certify  # writes the report too
from safecert.blackbox.rejudge import rejudge
from safecert.certificate import read_certificate
from safecert.report import write_run_report
from safecert.signing import fingerprint, generate_keypair, load_public_key, sign_file
from tests.blackbox.pipeline_helpers import write_run
from tests.conftest import REPO, run_cli
from tests.report.browser import dump_dom, needs_chromium

CONFIG = """
policy = "python:bbpipe_pol:cartpole"
env = "CartPole-v1"
episodes = 10
max_steps = 30
[spec]
budget = 0.0
cost = 'info.get("cost", 0)'
p_star = 0.5
[envelope]
act_noise = { kind = "uniform", levels = [0.0, 0.5] }
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from safecert.api import certify_shield

    root = tmp_path_factory.mktemp("history")
    runs = root / "runs"
    config = write_run(root / "cfg", CONFIG)
    certify(config, runs / "cart", workers=1, progress=False)
    _, where = rejudge(runs / "cart", budget=1.0, p_star=0.9)
    write_run_report(where / "certificate.json")
    key, pub = generate_keypair(root / "keys")
    sign_file(runs / "cart" / "certificate.json", key)
    shield = REPO / "examples" / "shield"
    certify_shield(shield / "grid.toml", shield / "grid_logs.jsonl", out=runs / "grid")
    (runs / "broken").mkdir()
    (runs / "broken" / "certificate.json").write_text('{"kind": "blackbox"}')
    return runs, fingerprint(load_public_key(pub))


@needs_chromium
def test_index_lists_every_certificate_with_working_links(runs):
    folder, signer = runs
    done = run_cli("report", str(folder), "--json")
    assert done.code == 0, done.stderr
    data = done.json()
    paths = {e["path"]: e for e in data["certificates"]}
    assert set(paths) == {
        "cart/certificate.json",
        "cart/rejudge_d1_p0.9/certificate.json",
        "grid/certificate.json",
        "broken/certificate.json",
    }
    assert paths["broken/certificate.json"]["error"]
    assert paths["cart/certificate.json"]["signature"].startswith(f"signed by {signer}")
    assert paths["grid/certificate.json"]["signature"] == "unsigned"
    dom = dump_dom(folder / "index.html")
    rows = dom.find_all("tr", data_path=True)
    assert len(rows) == 4
    for row in rows:
        path = row.attrs["data-path"]
        cells = [td.text for td in row.find_all("td")]
        links = [a.attrs["href"] for a in row.find_all("a")]
        assert all((folder / href).is_file() for href in links)  # relative links resolve
        if path == "broken/certificate.json":
            assert row.attrs["data-status"] == "warn" and "UNREADABLE" in cells
            continue
        cert = read_certificate(folder / path)
        assert cells[0] == cert.created_utc and cells[1] == str(Path(path).parent)
        posthoc = getattr(cert.result, "rejudged", None) is not None
        assert cells[2] == cert.kind
        assert cells[3] == cert.verdict + (" (re-judged post hoc)" if posthoc else "")
        assert len(links) == 2  # certificate and report.html
    dates = [r.find_all("td")[0].text for r in rows if r.attrs["data-status"] != "warn"]
    assert dates == sorted(dates, reverse=True)  # newest first


def test_report_on_a_missing_folder_is_one_line_exit_2(tmp_path):
    done = run_cli("report", str(tmp_path / "nope"))
    assert done.code == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().count("\n") == 0 and "RUNS_DIR" in done.stderr


def test_index_refuses_to_write_outside_the_folder(runs, tmp_path):
    folder, _ = runs
    done = run_cli("report", str(folder), "--out", str(tmp_path / "elsewhere.html"))
    assert done.code == 2 and "--out" in done.stderr
    assert not Path(tmp_path / "elsewhere.html").exists()
