"""Scripted vendor policies for SafePointGoal-v0 (``python:vendors.point_policies:<name>``).

Both read the observation layout of :class:`safecert.envs.point_goal.SafePointGoalEnv`: position,
velocity, goal vector, then one vector per hazard (hazard radius 0.3 by default). Both are batched:
``(B, 6 + 2 * n_hazards)`` -> ``(B, 2)`` forces in ``[-1, 1]``.

- :func:`goal_seeker` drives straight at the goal and ignores hazards (reaches the goal, pays cost).
- :func:`hazard_avoider` follows a velocity field that slides around hazards (reaches the goal,
  cost ~0).
"""

from __future__ import annotations

import numpy as np

HAZARD_RADIUS = 0.3
CRUISE_SPEED = 1.0


def _track(obs: np.ndarray, desired_velocity: np.ndarray) -> np.ndarray:
    """PD-style force that steers the velocity towards ``desired_velocity``."""
    return np.clip(2.0 * (desired_velocity - obs[:, 2:4]), -1.0, 1.0)


def _towards_goal(obs: np.ndarray) -> np.ndarray:
    goal = obs[:, 4:6]
    dist = np.linalg.norm(goal, axis=1, keepdims=True)
    return goal / np.maximum(dist, 1e-9) * np.minimum(CRUISE_SPEED, 1.5 * dist)


def goal_seeker(obs: np.ndarray) -> np.ndarray:
    """Straight to the goal at cruise speed; hazards ignored."""
    obs = np.atleast_2d(np.asarray(obs, dtype=np.float64))
    return _track(obs, _towards_goal(obs))


def hazard_avoider(obs: np.ndarray, margin: float = 0.8, push: float = 1.0) -> np.ndarray:
    """Goal-seeking velocity field deflected around hazards closer than ``margin``.

    Near a hazard the velocity towards it is replaced by a tangential slide (on the goal's side),
    and inside ``margin / 2`` of its edge a radial push of strength ``push`` moves the robot out.
    """
    obs = np.atleast_2d(np.asarray(obs, dtype=np.float64))
    desired = _towards_goal(obs)
    hazards = obs[:, 6:].reshape(len(obs), -1, 2)
    dist = np.linalg.norm(hazards, axis=2)  # (B, H) distance to hazard centres
    clearance = dist - HAZARD_RADIUS
    unit = hazards / np.maximum(dist, 1e-9)[..., None]  # robot -> hazard direction
    heading = np.einsum("bhk,bk->bh", unit, desired)  # > 0: moving towards the hazard
    weight = np.clip((margin + 0.1 - clearance) / margin, 0.0, 1.0) * (heading > 0)
    # Tangent on the side of the goal (sign of the cross product), so the robot slides past.
    cross = unit[..., 0] * desired[:, None, 1] - unit[..., 1] * desired[:, None, 0]
    side = np.where(cross >= 0, 1.0, -1.0)
    tangent = np.stack([-unit[..., 1], unit[..., 0]], axis=2) * side[..., None]
    speed = np.linalg.norm(desired, axis=1, keepdims=True)
    radial = np.einsum("bhk,bk->bh", unit, desired)[..., None] * unit
    correction = (tangent * speed[:, None, :] - radial) * weight[..., None]
    close = np.clip((margin / 2 - clearance) / (margin / 2), 0.0, 1.0)[..., None]
    repulsion = -push * close * unit
    return _track(obs, desired + correction.sum(axis=1) + repulsion.sum(axis=1))
