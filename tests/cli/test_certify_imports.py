"""What a one-episode ``safecert certify`` imports (issue 28.3): the report of a run without a
failing episode replays nothing and has no signature to read, so neither the trajectory replays
(:mod:`safecert.report.trajectory`) nor the signing module (:mod:`safecert.signing`) is
imported; a signed certificate's report still reads its signature."""

from __future__ import annotations

import subprocess
import sys

from tests.blackbox.pipeline_helpers import tiny_run

PROBE = """
import sys
from safecert.cli.main import main
code = main(sys.argv[1:])
watched = ("safecert.report.trajectory", "safecert.signing")
print("LOADED", ",".join(m for m in watched if m in sys.modules))
sys.exit(code)
"""


def _certify(folder, *extra: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "certify", "run.toml", "--out", "out", *extra],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("LOADED"))
    return set(filter(None, line.split(" ", 1)[1].split(",")))


def test_a_report_without_failures_or_signature_imports_neither(tmp_path):
    tiny_run(tmp_path)
    assert _certify(tmp_path) == set()
    html = (tmp_path / "out" / "report.html").read_text()
    assert "unsigned" in html


def test_a_signed_certificates_report_reads_its_signature(tmp_path):
    tiny_run(tmp_path)
    from safecert.signing import generate_keypair

    private, _ = generate_keypair(tmp_path / "keys")
    assert "safecert.signing" in _certify(tmp_path, "--sign-key", str(private))
    html = (tmp_path / "out" / "report.html").read_text()
    assert "signed by " in html and "unsigned" not in html
