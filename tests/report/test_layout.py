"""Reports read right on any screen and on paper: measured in real headless Chromium.

Every word's text boxes are measured in the DOM (``tests.report.browser.measure``) at 1400 px,
at 420 px and with the print stylesheet at the printed line width: a number, a word or a badge
laid out on two lines fails. Tables too wide for a phone scroll in their own box instead of
squeezing to a character per line. Printed to PDF, every page carries "page i of n" and the
certificate's SHA-256. The status palette stays distinguishable under simulated deuteranopia.
"""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

from safecert.api import certify_blackbox as certify  # writes the report too
from safecert.blackbox.rejudge import rejudge
from safecert.document import sha256_file
from safecert.report import write_run_report
from safecert.report.html import (
    FAIL_COLOUR,
    INK,
    PASS_COLOUR,
    WARN_COLOUR,
    breakable,
    page,
)
from tests.blackbox.pipeline_helpers import write_run
from tests.conftest import REPO
from tests.report import browser
from tests.report.browser import (
    PRINT_WIDTH_PX,
    measure,
    needs_chromium,
    needs_pdftotext,
    pdf_text,
    print_pdf,
)
from tests.report.test_views import CONFIG


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("layout")
    config = write_run(folder, CONFIG.replace("episodes = 20", "episodes = 8"))
    certify(config, folder / "out", workers=1, progress=False)
    _, where = rejudge(folder / "out", budget=6.0, p_star=0.9)
    write_run_report(where / "certificate.json")
    return {"run": folder / "out", "rejudged": where}


def test_numbers_never_break_and_long_identifiers_may():
    digest = "4a496bec13af26759c24effc83752f1cade6b9571312ccaeb5b3f7b42614cb1b"
    assert breakable(f"sha256 (bytes) {digest}") == (
        f"sha256 (bytes) <span class='brk'>{digest}</span>"
    )
    for number in ("596.7576", "0.05", "-4.8", "1234567890123456789012345678", "[0.3,"):
        assert "brk" not in breakable(number), number
    assert breakable("--replay 3:1") == "<span class='nw'>--replay</span> 3:1"
    assert breakable("Clopper–Pearson <b>") == "<span class='nw'>Clopper–Pearson</span> &lt;b&gt;"


def test_the_stylesheet_breaks_no_token_anywhere():
    css = page("t", "")
    assert "overflow-wrap:anywhere}}" not in css and "word-break:break-all" not in css
    assert re.search(r"td,th\{[^}]*overflow-wrap:normal", css)
    assert ".brk{overflow-wrap:anywhere}" in css  # only spans that hold a long identifier


WIDTHS = [(1400, False), (420, False), (PRINT_WIDTH_PX, True)]


@needs_chromium
@pytest.mark.parametrize("which", ["run", "rejudged"])
@pytest.mark.parametrize(("width", "print_media"), WIDTHS, ids=["1400px", "420px", "print"])
def test_no_number_word_or_badge_is_laid_out_on_two_lines(runs, which, width, print_media):
    layout = measure(runs[which] / "report.html", width, print_media=print_media)
    assert layout.width == width
    assert layout.broken == [], layout.broken[:10]
    assert layout.overflowing == [], layout.overflowing[:10]  # wide tables scroll in their box
    if print_media:
        assert layout.wide_tables == []  # paper does not scroll: every table fits the line
    assert layout.brk, "the digests are long identifiers and may break"
    assert not [t for t in layout.brk if re.fullmatch(r"[-+]?[0-9.]+", t)]


@needs_chromium
def test_the_measurement_catches_a_mid_number_break(runs, tmp_path):
    """The old stylesheet (``overflow-wrap:anywhere`` on every cell) fails the test above."""
    html = (runs["run"] / "report.html").read_text()
    old = html.replace("overflow-wrap:normal;word-break:normal", "overflow-wrap:anywhere")
    assert old != html
    (tmp_path / "old.html").write_text(old)
    layout = measure(tmp_path / "old.html", 420)
    assert any(re.fullmatch(r"[0-9.]+", b["token"]) for b in layout.broken), layout.broken[:5]


@needs_chromium
@needs_pdftotext
def test_printed_pages_carry_page_numbers_and_the_certificate_digest(runs, tmp_path):
    run = runs["run"]
    digest = sha256_file(run / "certificate.json")
    assert f"certificate sha256 {digest}" in (run / "report.html").read_text()
    pdf = print_pdf(run / "report.html", tmp_path / "report.pdf")
    pages = pdf_text(pdf).split("\f")
    pages = [p for p in pages if p.strip()]
    assert len(pages) >= 3
    for i, text in enumerate(pages, start=1):
        assert re.search(rf"page {i} of {len(pages)}\b", text), (i, text[-400:])
        assert f"certificate sha256 {digest}" in " ".join(text.split()), i
    # every number of the every-cell table is printed whole (no "0.0|5" read as 0.0)
    words = set(" ".join(pages).split())
    md = (run / "report.md").read_text()
    numbers = set(re.findall(r"\| (0\.\d{4}) ", md))
    assert numbers and numbers <= words, sorted(numbers - words)


# Machado, Oliveira & Fernandes (2009), deuteranopia at severity 1.0, on linear RGB.
DEUTERANOPIA = np.array(
    [
        [0.367322, 0.860646, -0.227968],
        [0.280085, 0.672501, 0.047413],
        [-0.011820, 0.042940, 0.968881],
    ]
)


def _linear(hex_colour: str) -> np.ndarray:
    c = np.array([int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)]) / 255
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def _lab(linear: np.ndarray) -> np.ndarray:
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
    t = xyz @ linear / np.array([0.95047, 1.0, 1.08883])
    f = np.where(t > (6 / 29) ** 3, np.cbrt(t), t / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def _min_distance_deuteranopia(colours: list[str]) -> float:
    seen = [_lab(np.clip(DEUTERANOPIA @ _linear(c), 0, 1)) for c in colours]
    return min(
        float(np.linalg.norm(seen[i] - seen[j]))
        for i in range(len(seen))
        for j in range(i + 1, len(seen))
    )


def test_status_colours_stay_apart_for_a_deuteranope_and_their_text_is_legible():
    assert _min_distance_deuteranopia(["#2e9d57", "#d6453d", "#e0a526"]) < 20  # the old palette
    assert _min_distance_deuteranopia([PASS_COLOUR, FAIL_COLOUR, WARN_COLOUR]) > 30

    def luminance(c: str) -> float:
        return float(np.array([0.2126, 0.7152, 0.0722]) @ _linear(c))

    for status, colour in (("pass", PASS_COLOUR), ("fail", FAIL_COLOUR), ("warn", WARN_COLOUR)):
        lo, hi = sorted([luminance(colour), luminance(INK[status])])
        assert (hi + 0.05) / (lo + 0.05) >= 4.5, status


def test_under_ci_the_browser_tests_run_and_fail_without_chromium(monkeypatch, tmp_path):
    code = (
        f"import sys; sys.path.insert(0, {str(REPO)!r}); from tests.report import browser as b; "
        "print(b.needs_chromium.args[0], b.needs_pdftotext.args[0])"
    )
    for ci, want in (("true", "False False"), ("", None)):
        env = {"PATH": "/usr/bin:/bin", "CI": ci}
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
        )
        if want is not None:
            assert done.stdout.split() == want.split()
    monkeypatch.setattr(browser, "CHROMIUM", tmp_path / "no-chromium")
    with pytest.raises(AssertionError, match="chromium is absent"):
        browser.chromium(["--version"])


@pytest.fixture(scope="module")
def other_pages(runs, tmp_path_factory):
    """A sequential report, a shield report, a BNN report, a diff and an index."""
    from safecert.api import synthesize_shield
    from safecert.bnn.certify import certify_run
    from safecert.bnn.setup import benchmark_config
    from safecert.certificate import read_certificate
    from safecert.report.diff import diff_certificates, write_diff_html
    from safecert.report.index import build_index, write_index
    from tests.report.test_sequential_report import SEQUENTIAL

    root = tmp_path_factory.mktemp("pages")
    seq = write_run(root / "seq", SEQUENTIAL.replace("episodes = 40", "episodes = 16"))
    certify(seq, root / "runs" / "seq", workers=1, progress=False)
    shield = REPO / "examples" / "shield"
    synthesize_shield(
        shield / "grid.toml", shield / "grid_logs.jsonl", out=root / "runs" / "shield", epsilon=0.1
    )
    cfg = benchmark_config(
        "lds_x04",
        epsilon="1sigma",
        data={"bootstrap": False, "initial_samples": 50, "unsafe_samples": 50},
        learner={"epochs": 1},
        limits={"per_epsilon_s": 0.001},
    )
    bnn = certify_run(cfg, None, root / "runs" / "bnn").path
    write_run_report(bnn)
    a = read_certificate(runs["run"] / "certificate.json")
    b = read_certificate(runs["rejudged"] / "certificate.json")
    diff = write_diff_html(diff_certificates(a, b, "run", "rejudged"), root / "diff.html")
    return {
        "sequential": root / "runs" / "seq" / "report.html",
        "shield": root / "runs" / "shield" / "report.html",
        "bnn": root / "runs" / "bnn" / "report.html",
        "diff": diff,
        "index": write_index(build_index(root / "runs"), root / "runs"),
    }


@needs_chromium
@pytest.mark.parametrize("which", ["sequential", "shield", "bnn", "diff", "index"])
@pytest.mark.parametrize(("width", "print_media"), WIDTHS, ids=["1400px", "420px", "print"])
def test_every_kind_of_page_reads_whole_at_every_width(other_pages, which, width, print_media):
    layout = measure(other_pages[which], width, print_media=print_media)
    assert layout.broken == [], layout.broken[:10]
    assert layout.overflowing == [], layout.overflowing[:10]
    if print_media:
        assert layout.wide_tables == []
