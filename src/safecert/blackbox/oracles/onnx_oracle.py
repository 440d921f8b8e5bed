"""``onnx:path/model.onnx`` — a policy exported to ONNX, run with onnxruntime on float32 batches."""

from __future__ import annotations

from typing import Any

import numpy as np

from safecert.blackbox.oracles import OracleSpec
from safecert.blackbox.oracles.base import OracleFailure, check_actions, health_check, timed_call
from safecert.errors import OracleError


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
        self._flatten = False  # the model's input has rank 2: flatten each observation

    def _load(self) -> Any:
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
            self._flatten = len(self._input.shape) == 2
        return self._session

    def act(self, observations: np.ndarray) -> np.ndarray:
        try:
            session = self._load()
        except OracleError as exc:
            raise OracleFailure(str(exc)) from None
        obs = np.asarray(observations, dtype=np.float32)
        if self._flatten and obs.ndim != 2:
            obs = obs.reshape(len(obs), -1)
        feed = {self._name: obs}
        out = timed_call(
            lambda: session.run(None, feed)[0],
            self.spec.timeout_s,
            "onnxruntime",
        )
        return check_actions(out, len(obs))

    def probe(self, observations: np.ndarray | None = None) -> None:
        """Load the model and run it on ``observations`` (or one zero row when its shape is known)."""
        self._load()
        if observations is None:
            dims = self._input.shape[1:]
            if not all(isinstance(d, int) for d in dims):
                return
            observations = np.zeros((1, *dims))
        health_check(self, observations, "ONNX model")

    def close(self) -> None:
        self._session = None
