"""Episodes: the wrapped environment of a grid cell and batched lockstep rollouts.

:func:`build_cell_env` makes the environment and wraps it with the cell's envelope (innermost
first: physical shift, random dynamics, layout, delay, action perturbation, observation
perturbation — so the policy sees the perturbed observation and its action is perturbed before it
is delayed). :func:`run_lockstep` steps B copies of that environment together: at every step the
observations of all live copies go to the oracle in ONE call. A copy that finishes takes the next
job at once. Every episode is reset with its own seed and every wrapper re-seeds from it, so an
episode's outcome depends only on its seed — not on B, the worker or the order — provided the policy
answers each row independently of the others in the batch.

A failed oracle call (:class:`OracleFailure`) ends every episode that was waiting on it as a
failure, with the reason recorded; a reply of the wrong shape or out of the action space does too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from safecert.blackbox.adversary import ActionAdversary, ObservationAdversary
from safecert.blackbox.config import RunConfig
from safecert.blackbox.envelope import (
    ActionDelay,
    ActionNoise,
    LayoutRandomization,
    ObservationNoise,
    PhysicalShift,
    RandomDynamics,
)
from safecert.blackbox.jobs import EpisodeJob, EpisodeRecord
from safecert.blackbox.oracles import OracleFailure

Policy = Callable[[np.ndarray], np.ndarray]


def make_base_env(config: RunConfig, base_dir: Path) -> gym.Env:
    from safecert.envs import make_env

    return make_env(config.env, config.env_kwargs, base_dir)


def build_cell_env(
    config: RunConfig,
    base_dir: Path,
    params: dict[str, Any],
    obs_ranges: np.ndarray | None,
    policy: Policy,
) -> gym.Env:
    """The environment of one grid cell, wrapped with that cell's perturbations."""
    env = make_base_env(config, base_dir)
    env_ = config.envelope
    shifts = {k: params[k] for k in ("mass", "friction", "damping") if k in params}
    if any(v != 1.0 for v in shifts.values()):
        env = PhysicalShift(env, **shifts)
    if params.get("random_dynamics", 0.0) > 0:
        env = RandomDynamics(env, params["random_dynamics"])
    if params.get("layout", False):
        env = LayoutRandomization(env)
    if params.get("delay", 0) > 0:
        env = ActionDelay(env, params["delay"])
    level = params.get("act_noise", 0.0)
    if level > 0:
        kind = env_.act_noise.kind
        env = (
            ActionAdversary(env, level, config.adversary.candidates, cost_key(config))
            if kind == "linf"
            else ActionNoise(env, level, kind)
        )
    level = params.get("obs_noise", 0.0)
    if level > 0:
        assert obs_ranges is not None, "observation ranges are needed for observation noise"
        obs_ranges = np.asarray(obs_ranges, dtype=float).reshape(env.observation_space.shape)
        kind = env_.obs_noise.kind
        env = (
            ObservationAdversary(env, level, obs_ranges, policy, config.adversary.candidates)
            if kind == "linf"
            else ObservationNoise(env, level, obs_ranges, kind)
        )
    return env


def cost_key(config: RunConfig) -> str:
    return config.spec.cost.removeprefix("info:")


class _Episode:
    """Running totals of one live episode."""

    __slots__ = ("job", "obs", "ret", "cost", "steps", "info")

    def __init__(self, job: EpisodeJob, obs: np.ndarray, info: dict) -> None:
        self.job, self.obs, self.info = job, obs, info
        self.ret = 0.0
        self.cost = 0.0
        self.steps = 0


def _goal(config: RunConfig, terminated: bool, info: dict, ret: float) -> bool:
    goal = config.spec.goal
    if goal == "no_termination":
        return not terminated
    if goal.startswith("info:"):
        return bool(info.get(goal[5:], False))
    threshold = config.spec.return_threshold
    return threshold is not None and ret >= threshold


def _to_action(space: gym.Space, row: np.ndarray) -> Any:
    """One oracle row as an action of ``space``; OracleFailure if it does not fit."""
    if isinstance(space, spaces.Discrete):
        flat = np.asarray(row).reshape(-1)
        if flat.size != 1 or float(flat[0]) != int(flat[0]):
            raise OracleFailure(f"expected one integer action, got {np.asarray(row).tolist()}")
        action = int(flat[0])
        if not space.contains(action):
            raise OracleFailure(f"action {action} is outside {space}")
        return action
    arr = np.asarray(row, dtype=float)
    if arr.shape == space.shape:
        return arr
    if arr.size != int(np.prod(space.shape)):
        raise OracleFailure(f"expected an action of shape {space.shape}, got {arr.shape}")
    return arr.reshape(space.shape)


def run_lockstep(
    envs: Sequence[gym.Env], jobs: Sequence[EpisodeJob], policy: Policy, config: RunConfig
) -> Iterator[EpisodeRecord]:
    """Run ``jobs`` on the B = ``len(envs)`` copies in lockstep; yield records as episodes end."""
    queue = list(reversed(jobs))
    slots: list[_Episode | None] = [None] * len(envs)
    ckey = cost_key(config)
    max_steps = config.max_steps

    def record(ep: _Episode, terminated: bool, truncated: bool, why: str | None) -> EpisodeRecord:
        goal = why is None and _goal(config, terminated, ep.info, ep.ret)
        return EpisodeRecord(
            ep.job.cell,
            ep.job.index,
            ep.job.seed,
            ep.ret,
            ep.cost,
            goal,
            terminated,
            truncated,
            ep.steps,
            why,
        )

    def fill(i: int) -> Iterator[EpisodeRecord]:
        while queue:
            job = queue.pop()
            try:
                obs, info = envs[i].reset(seed=job.seed)
            except OracleFailure as exc:
                yield record(_Episode(job, None, {}), False, False, exc.reason)
                continue
            slots[i] = _Episode(job, np.asarray(obs, dtype=np.float64), info)
            return
        slots[i] = None

    for i in range(len(envs)):
        yield from fill(i)
    while True:
        live = [i for i, ep in enumerate(slots) if ep is not None]
        if not live:
            return
        batch = (
            slots[live[0]].obs[None] if len(live) == 1 else np.stack([slots[i].obs for i in live])
        )
        try:
            actions = np.asarray(policy(batch))
            if actions.ndim == 0 or actions.shape[0] != len(live):
                raise OracleFailure(f"expected {len(live)} action rows, got shape {actions.shape}")
        except OracleFailure as exc:
            for i in live:
                yield record(slots[i], False, False, exc.reason)
                yield from fill(i)
            continue
        for row, i in enumerate(live):
            ep = slots[i]
            env = envs[i]
            try:
                obs, reward, terminated, truncated, info = env.step(
                    _to_action(env.action_space, actions[row])
                )
            except OracleFailure as exc:
                yield record(ep, False, False, exc.reason)
                yield from fill(i)
                continue
            ep.steps += 1
            ep.ret += float(reward)
            ep.cost += float(info.get(ckey, 0.0))
            ep.obs = np.asarray(obs, dtype=np.float64)
            ep.info = info
            if max_steps is not None and ep.steps >= max_steps and not terminated:
                truncated = True
            if terminated or truncated:
                yield record(ep, bool(terminated), bool(truncated), None)
                yield from fill(i)
