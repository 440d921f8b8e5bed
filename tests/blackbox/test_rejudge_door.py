"""``safecert rejudge`` refuses a non-finite budget before it reads anything (issue 14)."""

from __future__ import annotations

import pytest

from tests.blackbox.pipeline_helpers import cli_here  # noqa: F401 - the fixture


@pytest.mark.parametrize("budget", ["inf", "nan", "-1", "1e400"])
def test_rejudge_budget_must_be_finite(cli_here, tmp_path, budget):  # noqa: F811
    result = cli_here("rejudge", tmp_path, "--budget", budget, "--p-star", "0.1")
    assert result.code == 2
    line = result.stderr.strip()
    assert "\n" not in line and line.startswith("safecert: error: --budget:"), line
    assert list(tmp_path.iterdir()) == []  # refused before touching the run folder
