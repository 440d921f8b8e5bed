"""``python:module:attr`` — an in-process callable as a policy oracle."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from safecert.blackbox.oracles import OracleSpec
from safecert.blackbox.oracles.base import (
    CallResult,
    OracleFailure,
    check_actions,
    each_call,
    health_check,
)
from safecert.errors import OracleError
from safecert.usercode import import_from


class PythonOracle:
    """Calls ``attr(observations)`` on a ``(B, *obs_shape)`` float64 batch.

    With ``spec.batched = False`` the function receives one observation at a time and the rows are
    stacked. An exception raised by the function, or a reply that fails :func:`check_actions`,
    becomes :class:`OracleFailure`. The code runs in this process and cannot be interrupted, so the
    per-call timeout is checked after the call returns: a call slower than ``timeout_s`` is a
    failure too (use ``exec:`` to bound a policy that may hang).
    """

    def __init__(self, spec: OracleSpec) -> None:
        self.spec = spec
        self._fn: Callable[[np.ndarray], Any] | None = None

    def _function(self) -> Callable[[np.ndarray], Any]:
        if self._fn is None:
            fn = import_from(self.spec.target, Path(self.spec.base_dir), field="policy")
            if not callable(fn):
                raise OracleError(f"{self.spec.target!r} is not callable", field="policy")
            self._fn = fn
        return self._fn

    def probe(self, observations: np.ndarray | None = None) -> None:
        """Import the callable; with ``observations``, also make one call that must succeed."""
        self._function()
        if observations is not None:
            health_check(self, observations, "policy")

    def act(self, observations: np.ndarray) -> np.ndarray:
        return self._call(np.asarray(observations, dtype=np.float64))

    def act_calls(self, observations: np.ndarray, size: int) -> np.ndarray | list[CallResult]:
        """A lockstep step's calls (:data:`~safecert.blackbox.oracles.base.Calls`): the
        function once per ``size`` rows, in order, each checked and timed alone as :meth:`act`
        does; the step's rows are converted to float64 once."""
        return each_call(self._call, np.asarray(observations, dtype=np.float64), size)

    def _call(self, obs: np.ndarray) -> np.ndarray:
        """One call on float64 rows, its reply checked by :func:`check_actions`."""
        fn = self._fn if self._fn is not None else self._function()
        start = time.perf_counter()
        try:
            if self.spec.batched:
                raw = fn(obs)
            else:
                raw = [np.asarray(fn(row)) for row in obs]
        except Exception as exc:  # the vendor's code: any error is a failed call, not a crash
            raise OracleFailure(f"policy raised {type(exc).__name__}: {exc}") from None
        elapsed = time.perf_counter() - start
        if elapsed > self.spec.timeout_s:
            raise OracleFailure(f"call took {elapsed:.3g}s > timeout {self.spec.timeout_s}s")
        return check_actions(raw, len(obs))

    def close(self) -> None:
        self._fn = None
