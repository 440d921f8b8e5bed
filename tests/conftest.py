"""Shared test helpers."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    def json(self) -> dict:
        return json.loads(self.stdout)


def run_cli(
    *args: str,
    cwd: Path | None = None,
    timeout: float = 600,
    env=None,
    in_subprocess: bool = False,
) -> CliResult:
    """Run the ``safecert`` command: in this process through ``safecert.cli.main.main`` (the same
    code path, exit code, stdout and stderr, without an interpreter start-up), or — with a
    working folder, an environment or ``in_subprocess`` (the smoke tests of the real command) —
    as a subprocess."""
    if cwd is None and env is None and not in_subprocess:
        return _in_process(args)
    proc = subprocess.run(
        [sys.executable, "-m", "safecert.cli.main", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        env=env,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def _in_process(args: tuple[object, ...]) -> CliResult:
    from safecert.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return CliResult(code, out.getvalue(), err.getvalue())


@pytest.fixture
def cli():
    return run_cli
