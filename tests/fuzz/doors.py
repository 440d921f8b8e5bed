"""One hostile case, run in the worker child (:mod:`tests.fuzz.worker`): lay the input out, pass it
through the door it attacks, and judge the outcome by the contract of :mod:`tests.fuzz.harness`."""

from __future__ import annotations

import os
import resource
import shutil
import tempfile
import time
import traceback
import warnings
from functools import cache
from pathlib import Path

import numpy as np

from tests.fuzz import harness
from tests.fuzz.worker import HIDDEN, MEMORY_FLAG_MB, Result

FORMATS = ("cost-expression", "blackbox-toml", "shield-model-toml", "bnn-toml")


@cache
def toml_format(name: str) -> harness.Format:
    return {
        "blackbox-toml": harness.blackbox_format,
        "shield-model-toml": harness.shield_model_format,
        "bnn-toml": harness.bnn_format,
    }[name]()


def run_case(fmt: str, data: bytes, path_kind: str, limit_s: float, root: Path) -> Result:
    """Run one case; any escape is caught here and reported, never raised."""
    peak_before = _peak_mb()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            if fmt == "cost-expression":
                outcome, problems = _expression_door(data, limit_s)
            else:
                outcome, problems = _command(toml_format(fmt), data, path_kind, limit_s, root)
        except MemoryError:
            return Result(memory=True, problems=["MemoryError outside the command"])
    shown = [
        f"{w.category.__name__}: {w.message}"[:200]
        for w in seen
        if w.category.__name__ not in HIDDEN
    ]
    peak = _peak_mb()
    grew = peak > MEMORY_FLAG_MB and peak > peak_before
    memory = "MemoryError" in outcome.error or grew
    if grew:
        problems.append(f"the process grew to {peak:.0f} MB (more than {MEMORY_FLAG_MB} MB)")
    return Result(
        code=outcome.code,
        stderr=outcome.stderr[:2000],
        seconds=outcome.seconds,
        traceback=bool(outcome.error) or "Traceback (most recent" in outcome.stderr,
        memory=memory,
        hang=outcome.overtime,
        warnings=shown,
        peak_mb=peak,
        problems=problems + [f"a warning reached the user: {w}" for w in shown[:3]],
    )


def _peak_mb() -> float:
    """The child's peak resident memory so far (Linux reports kB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _command(
    fmt: harness.Format, data: bytes, path_kind: str, limit_s: float, root: Path
) -> tuple[harness.Outcome, list[str]]:
    """The real command on ``data`` laid out as ``path_kind`` at the format's target path."""
    ws = Path(tempfile.mkdtemp(dir=root))
    fmt.setup(ws)
    target = ws / fmt.target
    target.parent.mkdir(parents=True, exist_ok=True)
    argv = list(fmt.argv)
    if path_kind == "file":
        target.write_bytes(data)
    elif path_kind == "folder":
        target.mkdir()
        (target / "config.toml").write_bytes(data)
    elif path_kind == "fifo":
        os.mkfifo(target)
    elif path_kind == "link":
        target.symlink_to("/dev/zero")
    elif path_kind == "dev-zero":
        argv = ["/dev/zero" if a == fmt.target else a for a in argv]
    before = harness._snapshot(ws, ws / "out")
    outcome = harness.run_cli(argv, ws, limit_s)
    after = harness._snapshot(ws, ws / "out")
    problems = harness.check(outcome, before, after)
    if not problems:
        shutil.rmtree(ws, ignore_errors=True)
    return outcome, problems


def _scopes() -> list[dict]:
    """Step scopes as a CartPole run gives them, ordinary and extreme (the episode aggregates
    included, for ``spec.goal``)."""
    from safecert.blackbox.spec import step_scope

    out = []
    for obs, info in (
        (np.array([0.1, -0.2, 0.03, 1.5]), {"cost": 0.0, "k": {"k": 1.0}}),
        (np.array([1e308, -1e308, 0.0, 5e-324]), {"cost": 1e308}),
        (np.array([np.nan, np.inf, -np.inf, 0.0]), {}),
    ):
        scope = step_scope(obs, np.int64(1), 1.0, info, False, False, 3)
        scope.update(episode_return=1e308, episode_cost=0.0, steps=4)
        out.append(scope)
    return out


def _expression_door(data: bytes, limit_s: float) -> tuple[harness.Outcome, list[str]]:
    """``spec.cost``/``spec.goal`` as a black-box run meets them: compiled (a ConfigError is the
    CLI's one line, exit 2), then evaluated on every scope (an EvalError is the episode's failure
    reason: exit 1); anything else escaping is a traceback."""
    from safecert.blackbox.spec import compile_spec
    from safecert.errors import SafecertError
    from safecert.expressions import EvalError

    cost, goal = data.decode().split("\0", 1)
    code, stderr, error, overtime = 0, "", "", False
    start = time.monotonic()
    try:
        with harness._alarm(limit_s):
            spec = compile_spec.__wrapped__(cost, goal)
            for scope in _scopes():
                for judge in (spec.step_cost, spec.reached):
                    try:
                        judge(scope)
                    except EvalError as exc:
                        code, stderr = 1, f"spec: {exc.reason}\n"
    except harness.Overtime:
        overtime = True
    except SafecertError as exc:
        code, stderr = 2, f"safecert: error: {exc}\n"
    except BaseException:  # noqa: BLE001 - any escape is the finding
        error = traceback.format_exc()
    outcome = harness.Outcome(code, "", stderr, error, overtime, time.monotonic() - start)
    return outcome, harness.check(outcome, {}, {})
