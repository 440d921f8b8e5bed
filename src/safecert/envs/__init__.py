"""Benchmark environments shipped with safecert, and :func:`make_env` for any environment.

Importing this package registers the built-in cost-aware tasks as Gymnasium ids (all put the
per-step cost in ``info["cost"]``):

- ``SafePointGoal-v0`` — NumPy 2-D point robot, circular hazards, goal (:mod:`.point_goal`);
  ``info["is_success"]`` when the goal is reached; 200 steps.
- ``SafeCartPole-v0`` — CartPole with cost 1 while the cart is outside a safe track band
  (:mod:`.cartpole`); 500 steps.
- ``SafeHopperVelocity-v0``, ``SafeHalfCheetahVelocity-v0``, ``SafeAntVelocity-v0`` — Gymnasium v5
  MuJoCo locomotion with cost 1 on each step whose forward velocity exceeds Safety-Gymnasium's
  threshold for that robot (:mod:`.velocity`); 1000 steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym

from safecert.errors import ConfigError

__all__ = ["BUILTIN_IDS", "in_worker", "make_env"]

BUILTIN_IDS = (
    "SafePointGoal-v0",
    "SafeCartPole-v0",
    "SafeHopperVelocity-v0",
    "SafeHalfCheetahVelocity-v0",
    "SafeAntVelocity-v0",
)


def _register() -> None:
    specs = {
        "SafePointGoal-v0": ("safecert.envs.point_goal:SafePointGoalEnv", 200, {}),
        "SafeCartPole-v0": ("safecert.envs.cartpole:SafeCartPoleEnv", 500, {}),
        "SafeHopperVelocity-v0": (
            "safecert.envs.velocity:make_velocity_env",
            1000,
            {"robot": "Hopper"},
        ),
        "SafeHalfCheetahVelocity-v0": (
            "safecert.envs.velocity:make_velocity_env",
            1000,
            {"robot": "HalfCheetah"},
        ),
        "SafeAntVelocity-v0": ("safecert.envs.velocity:make_velocity_env", 1000, {"robot": "Ant"}),
    }
    for env_id, (entry, steps, kwargs) in specs.items():
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=entry, max_episode_steps=steps, kwargs=kwargs)


_register()


def in_worker(env_spec: str, *, trusted: bool) -> bool:
    """True when :func:`make_env` runs ``env_spec`` in an environment worker (a child process):
    a ``python:`` environment that is not ``trusted``."""
    return env_spec.startswith("python:") and not trusted


def make_env(
    env_spec: str, env_kwargs: Mapping[str, Any] | None, base_dir: Path, *, trusted: bool = False
) -> gym.Env:
    """Build an environment from a config's ``env`` string and ``env_kwargs`` table.

    ``env_spec`` is a registered Gymnasium id (built-ins included) or ``python:module:factory``,
    where ``module`` is importable from ``base_dir`` and ``factory(**env_kwargs)`` returns a
    ``gymnasium.Env``. A ``python:`` environment is vendor code: it runs in an environment worker,
    a child process (:class:`safecert.envs.remote.RemoteEnv`), unless ``trusted`` (the run
    config's ``trust = "in-process"``). Every problem is one :class:`ConfigError` line naming
    ``env`` or ``env_kwargs``.
    """
    kwargs = dict(env_kwargs or {})
    if in_worker(env_spec, trusted=trusted):
        from safecert.envs.remote import RemoteEnv

        return RemoteEnv(env_spec, kwargs, Path(base_dir))
    if env_spec.startswith("python:"):
        from safecert.usercode import import_from

        factory = import_from(env_spec[len("python:") :], Path(base_dir).resolve(), field="env")
        if not callable(factory):
            raise ConfigError(f"{env_spec!r} is not callable", field="env")
        try:
            env = factory(**kwargs)
        except TypeError as exc:
            raise ConfigError(
                f"factory rejected the arguments ({exc})", field="env_kwargs"
            ) from None
        if not isinstance(env, gym.Env):
            raise ConfigError(
                f"{env_spec!r} returned {type(env).__name__}, not a gymnasium.Env", field="env"
            )
        return env
    try:
        return gym.make(env_spec, **kwargs)
    except gym.error.Error as exc:
        raise ConfigError(
            f"unknown environment {env_spec!r} ({exc})",
            field="env",
            fix="use a Gymnasium id, one of "
            + ", ".join(BUILTIN_IDS)
            + ", or python:module:factory",
        ) from None
    except TypeError as exc:
        raise ConfigError(
            f"{env_spec} rejected the arguments ({exc})", field="env_kwargs"
        ) from None
