"""``torchscript:path/model.pt`` — a TorchScript module (``torch.jit.save``) as a policy.

The module is loaded on the CPU with ``torch.jit.load`` and called on each row of a batch, as a
float32 tensor ``(1, *obs_shape)`` under ``torch.inference_mode`` (row by row: batched torch kernels
give a row different low-order bits at another batch size, so ``batch_size`` would change the
evidence); its output (the first element when it
returns a tuple or list) is the action batch. torch is part of the ``all`` extra. (torch ≥ 2.10
deprecates TorchScript in favour of ``torch.export``; the format still loads, and its deprecation
warning is silenced here so it does not reach the run's stderr.)
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np

from safecert.blackbox.oracles import OracleSpec
from safecert.blackbox.oracles.base import OracleFailure, check_actions, health_check, timed_call
from safecert.errors import OracleError


class TorchScriptOracle:
    """One loaded module, built lazily in the process that uses it (one torch thread). The call
    runs in this process: the timeout is checked after it returns (a slower call is a failure)."""

    def __init__(self, spec: OracleSpec) -> None:
        self.spec = spec
        self._module: Any = None

    def _load(self) -> Any:
        if self._module is None:
            try:
                import torch
            except ImportError:
                raise OracleError(
                    "torchscript: policies need torch",
                    field="policy",
                    fix="pip install 'safecert[torch]'",
                ) from None
            torch.set_num_threads(1)
            path = Path(self.spec.target)
            try:
                with warnings.catch_warnings():  # torch ≥ 2.10 marks TorchScript deprecated
                    warnings.simplefilter("ignore", DeprecationWarning)
                    module = torch.jit.load(str(path), map_location="cpu")
            except Exception as exc:  # torch raises RuntimeError with multi-line text
                raise OracleError(
                    f"cannot load TorchScript module {path} ({str(exc).splitlines()[0][:160]})",
                    field="policy",
                    fix="save it with torch.jit.save(torch.jit.script(model), 'model.pt')",
                ) from None
            module.eval()
            self._module = module
        return self._module

    def act(self, observations: np.ndarray) -> np.ndarray:
        import torch

        try:
            module = self._load()
        except OracleError as exc:
            raise OracleFailure(str(exc)) from None
        obs = torch.as_tensor(np.asarray(observations, dtype=np.float32))

        def row(i: int) -> np.ndarray:
            out = module(obs[i : i + 1])
            if isinstance(out, tuple | list):
                out = out[0]
            if not isinstance(out, torch.Tensor):
                raise OracleFailure(f"the module returned {type(out).__name__}, not a tensor")
            return out.detach().cpu().numpy()

        def forward() -> Any:  # row by row: a row's action never depends on the batch
            with torch.inference_mode():
                rows = [row(i) for i in range(len(obs))]
            return np.concatenate(rows) if rows else np.zeros((0,))

        return check_actions(timed_call(forward, self.spec.timeout_s, "torchscript"), len(obs))

    def probe(self, observations: np.ndarray | None = None) -> None:
        """Load the module; with ``observations``, answer them (one real call)."""
        self._load()
        if observations is not None:
            health_check(self, observations, "TorchScript module")

    def close(self) -> None:
        self._module = None
