"""The environment worker: runs a ``python:module:factory`` environment in a child process.

Started by :class:`safecert.envs.remote.RemoteEnv` (under the vendor supervisor) as

    python -I -B -m safecert.envs.worker MODULE:FACTORY BASE_DIR

it imports the factory with ``BASE_DIR`` first on ``sys.path`` and writes one ready line
(``{"ready": true}``, or ``{"error": "why"}`` when the factory cannot be imported). It hosts any
number of environments, each named by an id. Then, one JSON line in, one out:

- ``{"op": "make", "kwargs": {...}}`` → ``{"id": K, "observation_space": ..., "action_space": ...,
  "max_episode_steps": ...}`` (spaces as data, :func:`describe_space`)
- ``{"op": "reset", "id": K, "seed": S}`` → ``{"obs": [...], "info": {...}}``
- ``{"op": "step", "id": K, "action": A, "dtype": "float64", "shape": [...]}`` →
  ``{"obs": [...], "reward": r, "terminated": b, "truncated": b, "info": {...}}``
- ``{"op": "close", "id": K}`` → ``{}``

Observations travel as float64 (exact for float32 and float64 spaces); ``info`` values that are not
numbers, strings, booleans, lists or arrays arrive as the text ``"<unserialisable TYPE>"``. An
exception in the environment answers ``{"error": "TYPE: message"}``. Anything the environment
prints to stdout goes to stderr.
"""

from __future__ import annotations

import itertools
import os
import sys
from typing import Any

import numpy as np
import orjson

_IDS = itertools.count()
_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def describe_space(space: Any) -> dict[str, Any]:
    """A Gymnasium space as data (Box, Discrete, MultiDiscrete, MultiBinary); ValueError else."""
    from gymnasium import spaces

    if isinstance(space, spaces.Box):
        return {
            "type": "Box",
            "shape": list(space.shape),
            "low": _floats(space.low),
            "high": _floats(space.high),
            "dtype": str(space.dtype),
        }
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": np.asarray(space.nvec, dtype=np.int64)}
    if isinstance(space, spaces.MultiBinary):
        return {"type": "MultiBinary", "n": np.asarray(space.n, dtype=np.int64)}
    raise ValueError(f"a {type(space).__name__} space cannot cross the process boundary")


def _floats(values: Any) -> list[float | str]:
    """Flat float64 values, ±inf as the texts "inf"/"-inf" (JSON has no infinity)."""
    flat = np.asarray(values, dtype=np.float64).ravel().tolist()
    return [v if np.isfinite(v) else str(v) for v in flat]


def _default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    return f"<unserialisable {type(obj).__name__}>"


def _dumps(doc: dict[str, Any]) -> bytes:
    return orjson.dumps(doc, option=_OPTIONS, default=_default)


def _info(info: Any) -> dict[str, Any]:
    return {str(k): v for k, v in dict(info or {}).items()}


def _make(factory: Any, kwargs: dict[str, Any], envs: dict[int, Any]) -> dict[str, Any]:
    import gymnasium as gym

    try:
        env = factory(**kwargs)
    except TypeError as exc:
        raise ValueError(f"env_kwargs: the factory rejected the arguments ({exc})") from None
    if not isinstance(env, gym.Env):
        raise ValueError(f"the factory returned {type(env).__name__}, not a gymnasium.Env")
    key = next(_IDS)
    envs[key] = env
    return {
        "id": key,
        "observation_space": describe_space(env.observation_space),
        "action_space": describe_space(env.action_space),
        "max_episode_steps": env.spec.max_episode_steps if env.spec else None,
    }


def _serve(factory: Any, envs: dict[int, Any], request: dict[str, Any]) -> dict[str, Any]:
    op = request["op"]
    if op == "make":
        return _make(factory, request["kwargs"], envs)
    if op == "close":
        envs.pop(request["id"]).close()
        return {}
    env = envs[request["id"]]
    if op == "reset":
        obs, info = env.reset(seed=request["seed"])
        return {"obs": np.asarray(obs, dtype=np.float64), "info": _info(info)}
    if op == "step":
        action: Any = np.asarray(request["action"], dtype=request["dtype"]).reshape(
            request["shape"]
        )
        if action.ndim == 0:
            action = action[()]
        obs, reward, terminated, truncated, info = env.step(action)
        return {
            "obs": np.asarray(obs, dtype=np.float64),
            "reward": float(reward),
            "terminated": bool(terminated),
            "truncated": bool(truncated),
            "info": _info(info),
        }
    raise ValueError(f"unknown op {op!r}")


def main(argv: list[str]) -> int:
    target, base_dir = argv[1], argv[2]
    replies = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # the environment's prints go to stderr; stdout is the protocol's
    sys.stdout = sys.stderr
    from pathlib import Path

    from safecert.usercode import import_from

    try:
        factory = import_from(target, Path(base_dir), field="env")
        if not callable(factory):
            raise ValueError(f"{target!r} is not callable")
    except Exception as exc:  # the vendor's module: any failure is one line for the parent
        text = str(exc).partition("env: ")[2] or str(exc)
        replies.write(_dumps({"error": text}) + b"\n")
        return 1
    replies.write(b'{"ready":true}\n')
    envs: dict[int, Any] = {}
    for line in sys.stdin.buffer:
        try:
            reply = _serve(factory, envs, orjson.loads(line))
        except Exception as exc:  # the environment's own error fails this call, not the worker
            reply = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        replies.write(_dumps(reply) + b"\n")
    for env in envs.values():
        env.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
