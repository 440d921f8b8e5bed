"""The root command: commands built when used, a root --help that imports no command module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from safecert.cli.main import TABLE, _requiring, build_command
from safecert.extras import COMMANDS

PROBE = """
import sys
from safecert.cli.main import main
code = main(sys.argv[1:])
loaded = sorted(m for m in ("pydantic", "rich", "numpy", "safecert.cli.blackbox",
    "safecert.cli.shield", "safecert.cli.bnn", "safecert.cli.verify", "safecert.cli.stats",
    "matplotlib", "safecert.shield", "safecert.bnn")
    if m in sys.modules)
print("LOADED", ",".join(loaded))
sys.exit(code)
"""


def _loaded(*args: str, cwd: Path | None = None) -> tuple[int, str, set[str]]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )
    line = next(x for x in done.stdout.splitlines() if x.startswith("LOADED"))
    return done.returncode, done.stdout, set(filter(None, line.split(" ", 1)[1].split(",")))


@pytest.mark.parametrize("name", sorted(TABLE))
def test_each_summary_is_the_start_of_its_commands_own_help(name):
    command = build_command(name)
    first = " ".join((command.help or "").split("\n\n")[0].split())
    summary = TABLE[name][2]
    assert first.startswith(summary.rstrip(".")), (name, first)


def test_root_help_lists_every_command_and_imports_none_of_them():
    code, out, loaded = _loaded("--help")
    assert code == 0
    for name in TABLE:
        assert f"  {name} " in out
    assert loaded == set()  # no command module, no pydantic, rich or numpy


def test_bound_imports_only_its_own_command_module():
    """Its table is drawn by :mod:`safecert.cli.output` itself: no Rich (about 40 ms)."""
    code, out, loaded = _loaded("bound", "--failures", "3", "--episodes", "100")
    assert code == 0 and "upper_bound" in out
    assert loaded == {"safecert.cli.stats"}


def test_bound_json_needs_neither_pydantic_nor_numpy_nor_rich():
    """``--json`` prints through the one canonical writer (:mod:`safecert.canonical`), which
    looks models and arrays up instead of importing their libraries."""
    code, out, loaded = _loaded("bound", "--failures", "3", "--episodes", "100", "--json")
    assert code == 0 and '"upper_bound": 0.' in out
    assert loaded == {"safecert.cli.stats"}


def test_a_certify_without_rate_plots_or_odd_maps_never_imports_matplotlib(tmp_path):
    """The report's distributions picture is drawn with Pillow: matplotlib's import (about half
    a second) is paid only by runs with a perturbation axis or a counterexample to plot; the
    console summary needs no Rich, and a black-box certificate no shield or BNN models."""
    (tmp_path / "pol.py").write_text(
        "import numpy as np\n\ndef act(obs):\n    return np.zeros(len(obs), dtype=np.int64)\n"
    )
    (tmp_path / "run.toml").write_text(
        'policy = "python:pol:act"\nenv = "CartPole-v1"\nepisodes = 2\nmax_steps = 20\n'
        'trust = "in-process"\n[spec]\nbudget = 0.0\np_star = 0.5\ncost = "0"\n'
        'goal = "steps >= 0"\n'  # no failure: no counterexample trajectories to plot
    )
    code, out, loaded = _loaded(
        "certify", "run.toml", "--out", "out", "--workers", "1", cwd=tmp_path
    )
    assert code in (0, 1), out
    assert (tmp_path / "out" / "distributions.png").read_bytes().startswith(b"\x89PNG")
    assert "matplotlib" not in loaded and "safecert.cli.blackbox" in loaded
    assert "rich" not in loaded and "safecert.shield" not in loaded and "safecert.bnn" not in loaded


def test_an_unknown_command_is_one_line_with_a_suggestion(capsys):
    from safecert.cli.main import main

    assert main(["bund"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "No such command 'bund'" in err[0] and "'bound'" in err[0]


def test_no_arguments_print_the_root_help_and_exit_2(capsys):
    from safecert.cli.main import main

    assert main([]) == 2
    out, err = capsys.readouterr()
    assert out.startswith("Usage: safecert") and "  certify " in out and err == ""


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_every_command_that_needs_an_extra_exists_and_checks_it(path):
    """extras.COMMANDS names real command paths of TABLE, and each one's callback checks its
    extra (a renamed command would otherwise silently lose its check)."""
    first, *rest = path.split()
    command = build_command(first)
    for name in rest:
        command = command.commands[name]
    checks = _requiring(path, print).__code__  # the wrapper that calls require_command first
    assert command.callback.__code__ is checks, path
