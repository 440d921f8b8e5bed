"""``onnx:path/model.onnx`` — a policy exported to ONNX, run with onnxruntime on float32 batches."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numpy as np

from safecert.blackbox.oracles import OracleSpec
from safecert.blackbox.oracles.base import (
    CallResult,
    OracleFailure,
    check_actions,
    each_call,
    health_check,
    timed_call,
)
from safecert.errors import OracleError

#: a session's run: ``(output names, {input name: array}, run options) -> outputs``
Run = Callable[[list[str], dict[str, np.ndarray], Any], list[Any]]


class OnnxOracle:
    """One ``InferenceSession`` (CPU provider, one intra- and one inter-op thread by default, so
    worker processes do not oversubscribe the cores), built lazily in the process that uses it.

    The model's first input receives the batch as float32 (flattened to ``(B, -1)`` when the model
    input has rank 2); its first output is the action batch. The call runs in this process, so the
    timeout is checked after it returns (a slower call is a failure).
    """

    def __init__(self, spec: OracleSpec, threads: int = 1) -> None:
        self.spec = spec
        self.threads = threads
        self._session: Any = None
        self._input: Any = None
        self._name = ""
        self._outputs: list[str] = []
        self._run: Run | None = None
        self._flatten = False  # the model's input has rank 2: flatten each observation

    def load(self) -> Any:
        """Open the session (once): :class:`OracleError` on ``policy`` for a file onnxruntime
        cannot load. Nothing runs the model here."""
        if self._session is None:
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
            options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            options.log_severity_level = 3
            try:
                self._session = ort.InferenceSession(
                    self.spec.target, options, providers=["CPUExecutionProvider"]
                )
            except Exception as exc:  # onnxruntime raises its own untyped errors for bad files
                raise OracleError(
                    f"cannot load ONNX model {self.spec.target} ({str(exc).splitlines()[0]})",
                    field="policy",
                ) from None
            self._input = self._session.get_inputs()[0]
            self._name = self._input.name
            self._outputs = [output.name for output in self._session.get_outputs()]
            self._flatten = len(self._input.shape) == 2
            self._run = session_run(self._session)
        return self._session

    def act(self, observations: np.ndarray) -> np.ndarray:
        return self._call(np.asarray(observations, dtype=np.float32))

    def act_calls(self, observations: np.ndarray, size: int) -> np.ndarray | list[CallResult]:
        """A lockstep step's calls (:data:`~safecert.blackbox.oracles.base.Calls`): one
        session run per ``size`` rows, in order, each checked and timed alone as :meth:`act`
        does; the step's rows are converted to float32 once."""
        return each_call(self._call, np.asarray(observations, dtype=np.float32), size)

    def _call(self, obs: np.ndarray) -> np.ndarray:
        """One call on float32 rows: the model's first output, checked by
        :func:`check_actions`; a failed or late run is an :class:`OracleFailure`."""
        run = self._run
        if run is None:
            try:
                self.load()
            except OracleError as exc:
                raise OracleFailure(str(exc)) from None
            run = cast(Run, self._run)  # set by load
        if self._flatten and obs.ndim != 2:
            obs = obs.reshape(len(obs), -1)
        outputs = timed_call(
            run, self.spec.timeout_s, "onnxruntime", self._outputs, {self._name: obs}, None
        )
        return check_actions(outputs[0], len(obs))

    def probe(self, observations: np.ndarray | None = None) -> None:
        """Load the model and run it on ``observations`` (or one zero row when its shape is known)."""
        self.load()
        if observations is None:
            dims = self._input.shape[1:]
            if not all(isinstance(d, int) for d in dims):
                return
            observations = np.zeros((1, *dims))
        health_check(self, observations, "ONNX model")

    def close(self) -> None:
        self._session = None
        self._run = None


def session_run(session: Any) -> Run:
    """How :class:`OnnxOracle` runs ``session``: the compiled session's own ``run`` below
    ``InferenceSession.run`` when every check that Python wrapper makes on a call holds for
    every call the oracle makes — the model has one input and the feed names it (no required
    input missing), the feed holds a NumPy array (no OrtValue whose device to check) and the
    output names are given, and the session runs on the CPU provider alone (no WebGPU graph
    capture to refuse, no other provider to fall back from) — else ``session.run``. The same
    outputs and the same errors either way; the wrapper's checks are Python that runs on every
    call (≈ 4k instructions of a ≈ 60k-instruction call of a small policy)."""
    inner = getattr(session, "_sess", None)
    if (
        inner is None
        or len(session.get_inputs()) != 1
        or session.get_providers() != ["CPUExecutionProvider"]
    ):
        return session.run  # type: ignore[no-any-return]
    return inner.run  # type: ignore[no-any-return]
