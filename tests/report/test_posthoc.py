"""A run and its re-judged copy: ``diff`` names only what changed (the episode store moved, its
bytes did not), warns that cells gained post hoc are not certified, and the runs index lists the
re-judged run as such, never as a plain verdict."""

from __future__ import annotations

import pytest

from safecert.api import certify_blackbox as certify
from safecert.blackbox.rejudge import rejudge
from safecert.certificate import read_certificate
from safecert.report import write_run_report
from safecert.report.diff import diff_certificates, diff_html, diff_text
from safecert.report.index import build_index, write_index
from tests.blackbox.pipeline_helpers import write_run
from tests.report.test_views import CONFIG


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    folder = tmp_path_factory.mktemp("posthoc")
    config = write_run(folder, CONFIG.replace("episodes = 20", "episodes = 6"))
    certify(config, folder / "runs" / "run", workers=1, progress=False)
    _, where = rejudge(folder / "runs" / "run", budget=6.0, p_star=0.9)
    write_run_report(where / "certificate.json")
    return folder / "runs", folder / "runs" / "run", where


def test_diff_of_a_run_and_its_rejudged_copy(pair):
    _, run, where = pair
    a, b = read_certificate(run / "certificate.json"), read_certificate(where / "certificate.json")
    d = diff_certificates(a, b)
    store = [c for c in d.digests if c.path == "evidence episodes"]
    assert [c.status for c in store] == ["moved, same sha256"]
    assert not [c for c in d.digests if c.status == "changed"]
    assert d.odd_gained and d.posthoc == ["B"]
    text = diff_text(d)
    assert "evidence episodes: " in text and "(moved, same sha256)" in text
    assert "episodes: changed" not in text
    assert "warning: B is re-judged post hoc" in text
    assert text.index("warning:") < text.index("ODD cells gained")
    html = diff_html(d)
    assert "id='posthoc'" in html and html.index("id='posthoc'") < html.index("id='odd'")
    assert diff_certificates(a, a).posthoc == [] and "warning" not in diff_text(
        diff_certificates(a, a)
    )


def test_the_index_lists_a_rejudged_run_as_post_hoc(pair):
    runs, _, where = pair
    entries = build_index(runs)
    by_path = {e.path: e for e in entries}
    rel = (where / "certificate.json").relative_to(runs).as_posix()
    assert by_path[rel].posthoc and not by_path["run/certificate.json"].posthoc
    html = write_index(entries, runs).read_text()
    row = html[html.index(f"data-path='{rel}'") :].split("</tr>")[0]
    assert "(re-judged post hoc)" in row
    other = html[html.index("data-path='run/certificate.json'") :].split("</tr>")[0]
    assert "post hoc" not in other
