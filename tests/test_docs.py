"""The Python API page's examples run as written (doctests), and the example script works."""

from __future__ import annotations

import doctest
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # 40–100 s on 2 cores (measured with --durations); runs in make test-all
def test_python_api_page_examples(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # the page's paths are relative to the repository
    failures, tried = doctest.testfile(
        str(REPO / "docs" / "python-api.md"),
        module_relative=False,
        globs={"OUT": tmp_path},
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
        raise_on_error=False,
    )
    assert tried >= 15 and failures == 0


@pytest.mark.slow  # the doctests above run the same three engines in the normal suite
def test_example_script_runs_all_three_engines(tmp_path):
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "python_api.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["black-box", "shield", "bnn"]
    assert all("verified: True" in line for line in lines)
