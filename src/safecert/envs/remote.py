"""A ``python:module:factory`` environment on the far side of the trust boundary.

:func:`safecert.envs.make_env` returns a :class:`RemoteEnv` for a ``python:`` environment: a
``gymnasium.Env`` whose spaces, ``reset`` and ``step`` are answered by an environment worker
(:mod:`safecert.envs.worker`), a supervised child process. The factory's module — vendor code —
never runs in safecert's process; only data crosses (observations, actions, rewards, flags, an
``info`` dictionary of plain values). One worker per process and factory hosts every copy
(:class:`EnvHost`); the last copy closed closes it.

Deadlines: every call has :data:`ENV_CALL_TIMEOUT_S` (start-up: the channel's grace). A worker that
fails a call, dies or hangs fails that call as :class:`OracleFailure` (the rollout records the
episode as failed, with the reason) and is restarted on the next call; copies made before the
restart are re-made at their next ``reset``.

What does not cross: attributes of the environment object. Envelope perturbations that set
physical parameters or redraw a layout through ``env.unwrapped`` find none on a ``RemoteEnv`` and
say so before the run (a ConfigError on ``envelope``); use a registered Gymnasium id for them, or
``trust = "in-process"`` when you own the environment's code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import orjson
from gymnasium import spaces
from gymnasium.envs.registration import EnvSpec

from safecert.blackbox.oracles.base import OracleFailure
from safecert.errors import ConfigError
from safecert.isolation import Channel, ChannelFailure, worker_command

#: the deadline of one reset or step of an isolated environment
ENV_CALL_TIMEOUT_S = 60.0


def _space(desc: dict[str, Any]) -> gym.Space:
    kind = desc["type"]
    if kind == "Box":
        shape = tuple(desc["shape"])

        def bound(values: list) -> np.ndarray:
            flat = np.array([float(v) for v in values], dtype=np.float64)
            return flat.reshape(shape).astype(desc["dtype"])

        return spaces.Box(bound(desc["low"]), bound(desc["high"]), dtype=np.dtype(desc["dtype"]))
    if kind == "Discrete":
        return spaces.Discrete(int(desc["n"]), start=int(desc["start"]))
    if kind == "MultiDiscrete":
        return spaces.MultiDiscrete(np.asarray(desc["nvec"], dtype=np.int64))
    if kind == "MultiBinary":
        return spaces.MultiBinary(np.asarray(desc["n"], dtype=np.int64).tolist())
    raise ValueError(f"unknown space {kind!r}")


class EnvHost:
    """One environment worker for ``target`` (``module:factory``) in ``base_dir``."""

    _hosts: dict[tuple[str, str], EnvHost] = {}

    def __init__(self, target: str, base_dir: str) -> None:
        self.key = (target, base_dir)
        self.channel = Channel(
            worker_command("safecert.envs.worker", target, base_dir),
            cwd=base_dir,
            timeout_s=ENV_CALL_TIMEOUT_S,
            what="environment worker",
            handshake=True,
        )
        self.users = 0

    @classmethod
    def get(cls, target: str, base_dir: str) -> EnvHost:
        host = cls._hosts.get((target, base_dir))
        if host is None:
            host = cls._hosts[(target, base_dir)] = EnvHost(target, base_dir)
        return host

    @property
    def generation(self) -> int:
        """Changes whenever the worker is (re)started: ids of an older generation are gone."""
        return self.channel.restarts

    def call(self, request: dict[str, Any]) -> dict[str, Any]:
        """One request; the worker's ``{"error"}`` or a failed round trip is OracleFailure."""
        try:
            line = self.channel.round_trip(orjson.dumps(request, option=orjson.OPT_SERIALIZE_NUMPY))
        except ChannelFailure as exc:
            raise OracleFailure(f"environment: {exc.reason}") from None
        if not self.channel.ready_line.startswith(b'{"ready"'):  # the factory failed to load
            try:
                why = str(orjson.loads(self.channel.ready_line).get("error", "not ready"))
            except (orjson.JSONDecodeError, AttributeError):
                why = "the environment worker's first line is not its ready line"
            raise OracleFailure(f"environment: {why[:300]}")
        try:
            reply = orjson.loads(line)
        except orjson.JSONDecodeError:
            self.channel.close()
            raise OracleFailure("environment worker: reply is not JSON; restarted") from None
        if not isinstance(reply, dict):
            raise OracleFailure("environment worker: reply is not a JSON object")
        if "error" in reply:
            raise OracleFailure(f"environment: {str(reply['error'])[:300]}")
        return reply

    def release(self) -> None:
        self.users -= 1
        if self.users <= 0:
            self.channel.close()
            self._hosts.pop(self.key, None)


class RemoteEnv(gym.Env):
    """A ``python:`` environment built and stepped in an environment worker (module docstring).

    Raises ConfigError (field ``env``/``env_kwargs``) when the factory cannot be imported, rejects
    the arguments, or returns no ``gymnasium.Env``."""

    def __init__(self, env_spec: str, kwargs: dict[str, Any], base_dir: Path) -> None:
        target = env_spec[len("python:") :]
        try:
            self._kwargs = orjson.loads(orjson.dumps(kwargs))
        except TypeError as exc:
            raise ConfigError(
                f"cannot be sent to the environment worker ({exc})",
                field="env_kwargs",
                fix="use numbers, strings, booleans, arrays and tables",
            ) from None
        self._host = EnvHost.get(target, str(Path(base_dir).resolve()))
        self._host.users += 1
        self._id: int | None = None
        try:
            made = self._make()
        except OracleFailure as exc:
            self.close()
            field = "env_kwargs" if "env_kwargs" in exc.reason else "env"
            reason = exc.reason.removeprefix("environment: ").replace("env_kwargs: ", "")
            raise ConfigError(reason, field=field) from None
        self.observation_space = _space(made["observation_space"])
        self.action_space = _space(made["action_space"])
        steps = made["max_episode_steps"]
        self.spec = EnvSpec(id="IsolatedPythonEnv-v0", max_episode_steps=steps)

    def _make(self) -> dict[str, Any]:
        made = self._host.call({"op": "make", "kwargs": self._kwargs})
        self._id, self._generation = int(made["id"]), self._host.generation
        return made

    def _obs(self, reply: dict[str, Any]) -> np.ndarray:
        return np.asarray(reply["obs"], dtype=self.observation_space.dtype).reshape(
            self.observation_space.shape
        )

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        super().reset(seed=seed)
        if self._id is None or self._generation != self._host.generation:
            self._make()
        reply = self._host.call({"op": "reset", "id": self._id, "seed": seed})
        return self._obs(reply), reply["info"]

    def step(self, action: Any) -> tuple:
        if self._id is None or self._generation != self._host.generation:
            raise OracleFailure("environment worker restarted: this episode's state is gone")
        arr = np.ascontiguousarray(action)
        reply = self._host.call(
            {
                "op": "step",
                "id": self._id,
                "action": arr.astype(np.float64) if arr.dtype.kind == "f" else arr,
                "dtype": str(arr.dtype),
                "shape": list(arr.shape),
            }
        )
        return (
            self._obs(reply),
            float(reply["reward"]),
            bool(reply["terminated"]),
            bool(reply["truncated"]),
            reply["info"],
        )

    def close(self) -> None:
        host, self._host = getattr(self, "_host", None), None  # type: ignore[assignment]
        if host is None:
            return
        if self._id is not None and self._generation == host.generation and host.users > 1:
            try:
                host.call({"op": "close", "id": self._id})
            except OracleFailure:
                pass
        host.release()
