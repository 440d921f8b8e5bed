"""``sb3:path/model.zip`` — a Stable-Baselines3 model (PPO, A2C, SAC, TD3, DQN), no user code.

The algorithm is read from the file itself (:func:`sb3_algorithm`: the module of the saved policy
class and the hyper-parameters only PPO saves), the model is loaded on the CPU, and every batch is
answered row by row by ``model.predict(row, deterministic=True)`` — the policy's mode, one
observation at a time, so an episode's outcome depends only on its seed: batched torch kernels give
a row different low-order bits with a different batch size (about 1e-4 on returns was measured), so
``batch_size`` would otherwise change the evidence. Stable-Baselines3 is an optional extra
(``pip install 'safecert[sb3]'``); it is imported here, in the process that uses the oracle.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from safecert.blackbox.oracles import OracleSpec
from safecert.blackbox.oracles.base import OracleFailure, check_actions, health_check, timed_call
from safecert.errors import ConfigError, OracleError

ALGORITHMS = ("PPO", "A2C", "SAC", "TD3", "DQN")


def sb3_algorithm(path: Path) -> str:
    """The algorithm that saved ``path`` (one of :data:`ALGORITHMS`), from the zip's ``data``
    document; ConfigError (field ``policy``) for a file that is not a model of these five."""
    try:
        with zipfile.ZipFile(path) as archive:
            data = json.loads(archive.read("data"))
    except (OSError, KeyError, zipfile.BadZipFile, ValueError) as exc:
        raise ConfigError(
            f"{path} is not a Stable-Baselines3 model zip ({exc.__class__.__name__}: {exc})",
            field="policy",
            fix="save the model with model.save('model.zip')",
        ) from None
    module = (
        str(data.get("policy_class", {}).get("__module__", "")) if isinstance(data, dict) else ""
    )
    for algo in ("DQN", "SAC", "TD3"):
        if module == f"stable_baselines3.{algo.lower()}.policies":
            return algo
    if module == "stable_baselines3.common.policies":
        return "PPO" if "clip_range" in data else "A2C"
    raise ConfigError(
        f"{path} was saved by a policy of {module or 'an unknown module'!r}",
        field="policy",
        fix=f"sb3: loads models of {', '.join(ALGORITHMS)}; wrap others with python:",
    )


class Sb3Oracle:
    """One loaded model, built lazily in the process that uses it (torch limited to one thread,
    so worker processes do not oversubscribe the cores). The call runs in this process: the
    timeout is checked after it returns (a slower call is a failure)."""

    def __init__(self, spec: OracleSpec) -> None:
        self.spec = spec
        self._model: Any = None

    def _load(self) -> Any:
        if self._model is None:
            try:
                import stable_baselines3 as sb3
                import torch
            except ImportError:
                raise OracleError(
                    "sb3: policies need Stable-Baselines3",
                    field="policy",
                    fix="pip install 'safecert[sb3]'",
                ) from None
            torch.set_num_threads(1)
            path = Path(self.spec.target)
            algo = getattr(sb3, sb3_algorithm(path))
            try:
                self._model = algo.load(path, device="cpu")
            except Exception as exc:  # SB3 raises many untyped errors for bad files
                raise OracleError(
                    f"cannot load {path} ({exc.__class__.__name__}: {str(exc).splitlines()[0]})",
                    field="policy",
                ) from None
        return self._model

    def act(self, observations: np.ndarray) -> np.ndarray:
        try:
            model = self._load()
        except (OracleError, ConfigError) as exc:
            raise OracleFailure(str(exc)) from None
        obs = np.asarray(observations, dtype=np.float32)

        def predict() -> Any:  # row by row: a row's action never depends on the batch
            rows = [model.predict(obs[i : i + 1], deterministic=True)[0] for i in range(len(obs))]
            return np.concatenate(rows) if rows else np.zeros((0,))

        return check_actions(
            timed_call(predict, self.spec.timeout_s, "stable-baselines3"), len(obs)
        )

    def probe(self, observations: np.ndarray | None = None) -> None:
        """Load the model and answer ``observations`` (or one zero observation of its space)."""
        model = self._load()
        if observations is None:
            observations = np.zeros((1, *model.observation_space.shape))
        health_check(self, observations, "Stable-Baselines3 model")

    def close(self) -> None:
        self._model = None
