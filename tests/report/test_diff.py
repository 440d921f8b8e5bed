"""``safecert diff`` on the two bundled HalfCheetah vendors (safe and fast ONNX policies), run for
real on the velocity-limited MuJoCo task with 10 episodes of 100 steps per cell and p* = 0.4.

Known changes: the policy parameter and digest; the verdict goes from PASS to FAIL: the safe vendor
passes every cell (0/10 failures, upper bound 0.336 < 0.4) while the fast one, trained without the
velocity limit, fails each cell more often and loses all six from the ODD.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from safecert.api import certify_blackbox as certify  # writes the report too
from safecert.certificate import read_certificate
from safecert.report.diff import cell_key, diff_certificates
from tests.conftest import REPO, run_cli
from tests.report.browser import dump_dom, needs_chromium

pytest.importorskip("mujoco")
pytest.importorskip("onnxruntime")


def _vendor_config(folder: Path, name: str) -> Path:
    examples = REPO / "examples"
    text = (examples / f"cheetah_onnx_{name}.toml").read_text()
    text = text.replace('"onnx:vendors/', f'"onnx:{examples}/vendors/')
    text = re.sub(r"(?m)^episodes = \d+", "episodes = 10", text)
    text = re.sub(r"(?m)^p_star = [0-9.]+", "p_star = 0.4", text)
    text = re.sub(r"(?m)^max_steps = \d+", "max_steps = 100", text)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.toml").write_text(text)
    return folder / "run.toml"


@pytest.fixture(scope="module")
def vendors(tmp_path_factory):
    root = tmp_path_factory.mktemp("vendors")
    out = {}
    for name in ("safe", "fast"):
        config = _vendor_config(root / name, name)
        certify(config, root / name / "out", workers=1, progress=False)
        out[name] = root / name / "out" / "certificate.json"
    return out


def test_diff_of_the_two_vendors_states_the_known_changes(vendors):
    safe, fast = read_certificate(vendors["safe"]), read_certificate(vendors["fast"])
    d = diff_certificates(safe, fast)
    assert not d.identical
    assert d.verdict == ("PASS", "FAIL")
    assert [c.path for c in d.parameters] == ["policy"]
    assert "cheetah_safe.onnx" in d.parameters[0].before
    assert "cheetah_fast.onnx" in d.parameters[0].after
    changed = {c.path for c in d.digests}
    assert {"input policy", "input config", "evidence episodes"} <= changed
    # ODD gained/lost against an independent set difference of the two certificates
    odd_safe = {cell_key(p) for p in safe.result.odd}
    odd_fast = {cell_key(p) for p in fast.result.odd}
    assert odd_safe == {f"act_noise={a}, mass={m}" for a in (0.0, 0.05) for m in (0.8, 1.0, 1.2)}
    assert d.odd_lost == sorted(odd_safe - odd_fast) and d.odd_gained == sorted(odd_fast - odd_safe)
    # every cell whose failures differ appears with both counts
    by_cell = {c.cell: {x.path: (x.before, x.after) for x in c.changes} for c in d.cells}
    for a, b in zip(safe.result.cells, fast.result.cells, strict=True):
        key = cell_key(a.params)
        if a.failures != b.failures:
            assert by_cell[key]["failures"] == (a.failures, b.failures)
            assert by_cell[key]["upper_bound"] == (a.upper_bound, b.upper_bound)
        assert b.failures > a.failures  # the fast vendor fails more in every cell


def test_diff_cli_text_json_and_exit_codes(vendors, tmp_path):
    same = run_cli("diff", str(vendors["safe"]), str(vendors["safe"]))
    assert same.code == 0 and "no differences" in same.stdout
    text = run_cli("diff", str(vendors["safe"]), str(vendors["fast"]))
    assert text.code == 1
    assert "ODD cells lost (6)" in text.stdout and "policy:" in text.stdout
    assert "verdict: PASS -> FAIL (changed)" in text.stdout
    js = run_cli("diff", str(vendors["safe"]), str(vendors["fast"]), "--json")
    assert js.code == 1
    data = js.json()
    assert data["identical"] is False and len(data["odd_lost"]) == 6
    assert data["verdict"] == [
        read_certificate(vendors["safe"]).verdict,
        read_certificate(vendors["fast"]).verdict,
    ]
    bad = run_cli("diff", str(tmp_path / "missing.json"), str(vendors["fast"]))
    assert bad.code == 2 and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and "certificate" in bad.stderr


@needs_chromium
def test_diff_html_page_in_a_browser(vendors, tmp_path):
    page = tmp_path / "diff.html"
    done = run_cli("diff", str(vendors["safe"]), str(vendors["fast"]), "--html", str(page))
    assert done.code == 1 and page.is_file()
    dom = dump_dom(page)
    odd = dom.find_all("table", id="odd")[0]
    lost = [r for r in odd.find_all("tr", data_status="fail")]
    assert len(lost) == 6 and all("lost" in r.text for r in lost)
    cells = dom.find_all("table", id="cells")[0]
    assert "failures" in cells.text and "upper_bound" in cells.text
    assert dom.find_all("table", id="parameters") and dom.find_all("table", id="digests")


def test_compare_names_added_removed_changed_and_digests_long_lists():
    from safecert.report.diff import LONG_LIST, compare

    a = {"x": 1, "y": {"z": [1, 2]}, "w": list(range(LONG_LIST + 1)), "gone": True}
    b = {"x": 1.5, "y": {"z": [1, 2]}, "w": list(range(1, LONG_LIST + 2)), "new": None}
    changes = {c.path: c for c in compare(a, b)}
    assert set(changes) == {"x", "w", "gone", "new"}
    assert (changes["x"].before, changes["x"].after, changes["x"].status) == (1, 1.5, "changed")
    assert changes["gone"].status == "removed" and changes["new"].status == "added"
    assert changes["w"].before.startswith(f"<{LONG_LIST + 1} values, sha256 ")
    assert compare({"k": 1}, {"k": 1.0})[0].status == "changed"  # int vs float is a change
