"""Velocity-constrained MuJoCo locomotion on Gymnasium's v5 tasks (Safety-Gymnasium's definition).

Safety-Gymnasium's ``Safety<Robot>Velocity-v1`` tasks give cost 1 at every step whose velocity
exceeds a per-robot threshold (Ji et al., "Safety-Gymnasium", NeurIPS 2023 Datasets & Benchmarks;
thresholds from ``safety_gymnasium/tasks/safe_velocity/*_v1.py``). The velocity is the forward
velocity ``x_velocity`` for Hopper and HalfCheetah, and the planar speed
``sqrt(x_velocity**2 + y_velocity**2)`` for Ant, as in Safety-Gymnasium. Velocities are the ones
Gymnasium v5 reports in ``info`` (torso displacement over one control step, ``dt``).
"""

from __future__ import annotations

import logging
from typing import Any

import gymnasium as gym
import numpy as np

from safecert.errors import ConfigError

logger = logging.getLogger(__name__)

VELOCITY_THRESHOLDS = {"Hopper": 0.7402, "HalfCheetah": 3.2096, "Ant": 2.6222}
PLANAR = {"Ant"}


class VelocityCost(gym.Wrapper):
    """Adds ``info["cost"] = 1.0`` on steps whose velocity exceeds ``threshold``, else ``0.0``.

    Also records ``info["velocity"]`` (the value compared) and ``info["velocity_threshold"]``.
    Rewards, observations and terminations are Gymnasium's, untouched; ``goal = "no_termination"``
    is the task's goal (the robot did not fall). The MuJoCo model stays reachable as
    ``env.unwrapped.model`` (``body_mass``, ``geom_friction``, ``dof_damping``) for physical shifts.
    """

    def __init__(self, env: gym.Env, threshold: float, *, planar: bool = False) -> None:
        super().__init__(env)
        if not threshold > 0:
            raise ConfigError(
                f"must be > 0 (got {threshold})", field="env_kwargs.velocity_threshold"
            )
        self.threshold = float(threshold)
        self.planar = planar

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        vx = float(info["x_velocity"])
        velocity = float(np.hypot(vx, float(info["y_velocity"]))) if self.planar else vx
        info["velocity"] = velocity
        info["velocity_threshold"] = self.threshold
        info["cost"] = float(velocity > self.threshold)
        return obs, float(reward), terminated, truncated, info

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        info["cost"] = 0.0
        return obs, info


def _log_mujoco_warning(message: str) -> None:
    if message not in _SEEN_MUJOCO_WARNINGS:
        _SEEN_MUJOCO_WARNINGS.add(message)
        logger.info("mujoco: %s", message.strip())


_SEEN_MUJOCO_WARNINGS: set[str] = set()


def route_mujoco_warnings() -> None:
    """Send MuJoCo's compiler warnings to this module's logger, once per distinct message.

    MuJoCo 4 warns on every model compile that Gymnasium's XML uses the deprecated
    ``settotalmass`` attribute; the default handler prints it to stderr and appends it to
    ``MUJOCO_LOG.TXT`` in the working directory for every environment copy.
    """
    import mujoco

    mujoco.set_mju_user_warning(_log_mujoco_warning)


#: each robot's XML compiled once per process (by model file): the master copies are never
#: handed out, only copies of them
_COMPILED: dict[str, Any] = {}


def _with_compiled_model(cls: type[gym.Env], kwargs: dict[str, Any]) -> gym.Env:
    """``cls(**kwargs)``, a Gymnasium MuJoCo environment, whose ``MjModel`` is a copy of the
    model file compiled once per process instead of a fresh compile of the XML.

    Gymnasium builds an environment's simulation in ``MujocoEnv._initialize_simulation``
    (compile the XML, widen the offscreen buffer to the render size, make the ``MjData``); here
    the same method runs on a copy (``mj_copyModel``) of that file's compiled model: the same
    model, its own buffers (a physical shift of one copy changes no other), the same data,
    and so the same steps bit for bit (tests/blackbox/test_perstep_paths.py). The class is ``cls``
    itself. A rollout builds one environment per lockstep copy: 16 HalfCheetah copies took
    37–44 ms compiled one by one and 17–22 ms as copies (benchmarks/RESULTS_speed.md, round 9).
    """
    import copy

    import mujoco

    env = cls.__new__(cls)

    def initialize_simulation() -> tuple[Any, Any]:
        path = env.fullpath  # type: ignore[attr-defined]
        master = _COMPILED.get(path)
        if master is None:
            master = _COMPILED[path] = mujoco.MjModel.from_xml_path(path)
        model = copy.copy(master)
        model.vis.global_.offwidth = max(model.vis.global_.offwidth, env.width)  # type: ignore[attr-defined]
        model.vis.global_.offheight = max(model.vis.global_.offheight, env.height)  # type: ignore[attr-defined]
        return model, mujoco.MjData(model)

    env._initialize_simulation = initialize_simulation  # type: ignore[attr-defined]
    try:
        cls.__init__(env, **kwargs)
    finally:
        del env._initialize_simulation  # type: ignore[attr-defined]
    return env


def make_velocity_env(
    robot: str, velocity_threshold: float | None = None, **kwargs: Any
) -> VelocityCost:
    """``<robot>-v5`` (Gymnasium MuJoCo) with Safety-Gymnasium's velocity cost.

    ``kwargs`` go to the Gymnasium environment (e.g. ``ctrl_cost_weight``, ``reset_noise_scale``);
    ``velocity_threshold`` overrides the robot's default from :data:`VELOCITY_THRESHOLDS`.
    """
    if robot not in VELOCITY_THRESHOLDS:
        raise ConfigError(
            f"unknown robot {robot!r}", field="env", fix=f"one of {sorted(VELOCITY_THRESHOLDS)}"
        )
    from gymnasium.envs.mujoco.ant_v5 import AntEnv
    from gymnasium.envs.mujoco.half_cheetah_v5 import HalfCheetahEnv
    from gymnasium.envs.mujoco.hopper_v5 import HopperEnv

    route_mujoco_warnings()
    classes = {"Hopper": HopperEnv, "HalfCheetah": HalfCheetahEnv, "Ant": AntEnv}
    base = _with_compiled_model(classes[robot], kwargs)
    threshold = VELOCITY_THRESHOLDS[robot] if velocity_threshold is None else velocity_threshold
    return VelocityCost(base, threshold, planar=robot in PLANAR)
