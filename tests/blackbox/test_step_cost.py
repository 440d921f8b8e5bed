"""``Expression.evaluate`` (behind ``EpisodeSpec.step_cost``, the per-step path) switches numpy's
error state through its context variable; it agrees with the compiled expression run under
``numpy.errstate`` itself on values and on errors, raises no numpy warning and leaves numpy's error
state as it found it."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from safecert.blackbox.spec import compile_spec, step_scope
from safecert.expressions import EvalError, as_number
from safecert.expressions.runtime import shorter

COSTS = [
    "info:cost",
    'info.get("cost", 0) + 0.5 * abs(obs[0])',
    "sqrt(0.2 - abs(obs[2]))",
    "1 / obs[1]",
    "exp(obs[3] * 1000)",
    "log(obs[1])",
    'info["missing"]',
    "obs[9]",
    "action * 2 + reward",
    "terminated or t > 3",
]

SCOPES = [
    step_scope(np.array([0.1, 0.0, 0.3, 0.0]), 1, 1.0, {"cost": 1.0}, False, False, 0),
    step_scope(np.array([-0.5, 2.0, 0.05, 1.0]), 0, 0.5, {"cost": 0.0}, True, False, 7),
    step_scope(np.array([1e300, -1.0, -0.1, -1.0]), 1, -2.0, {}, False, True, 3),
]


def _reference(cost: str, scope: dict) -> tuple[str, object]:
    """The cost through numpy's public ``errstate`` (the independent path)."""
    spec = compile_spec(cost, "no_termination")
    try:
        with np.errstate(over="raise", invalid="raise", divide="raise", under="ignore"):
            value = spec.cost._run(scope)
    except EvalError as exc:
        return "error", exc.reason
    except (TypeError, ValueError, IndexError, KeyError, ArithmeticError) as exc:
        return "error", f"{shorter(repr(cost))}: {exc}"
    try:
        return "value", as_number(value, f"spec.cost {cost!r}")
    except EvalError as exc:
        return "error", exc.reason


@pytest.mark.parametrize("cost", COSTS)
def test_step_cost_is_evaluate_on_values_and_errors(cost):
    spec = compile_spec(cost, "no_termination")
    before = np.geterr()
    seen = set()
    for scope in SCOPES:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a numpy warning fails the test
            try:
                got: tuple[str, object] = ("value", spec.step_cost(scope))
            except EvalError as exc:
                got = ("error", exc.reason)
        assert got == _reference(cost, scope)
        assert np.geterr() == before  # restored after a value and after an error
        seen.add(got[0])
    if cost in ("sqrt(0.2 - abs(obs[2]))", "1 / obs[1]", "exp(obs[3] * 1000)"):
        assert seen == {"value", "error"}  # the floating-point errors are really exercised
