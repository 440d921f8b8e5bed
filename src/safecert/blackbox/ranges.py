"""Ranges Δ_s of the observation dimensions, for range-scaled observation perturbations.

Bounded dimensions use high − low of the observation space. Unbounded ones (MuJoCo velocities, …)
get a range *estimated* from nominal rollouts (no perturbation; ``range_episodes`` episodes with
seeds from ``SeedSequence(master, spawn_key=(RANGE_CELL, i))``, disjoint from every grid episode):
the span max − min of the values observed, and 1.0 where the observed span is 0 (a constant
dimension would otherwise never be perturbed). The certificate reports which dimensions were
estimated (METHODS.md §2: "estimate it when the space is unbounded and say so").
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from safecert.blackbox.config import RunConfig
from safecert.blackbox.jobs import RANGE_CELL, episode_seed
from safecert.blackbox.oracles import OracleFailure
from safecert.blackbox.rollout import Policy, _to_action, make_base_env


def space_ranges(config: RunConfig, base_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) of the observation space as float arrays (±inf where unbounded)."""
    env = make_base_env(config, base_dir)
    try:
        space = env.observation_space
        return (
            np.broadcast_to(np.asarray(space.low, float), space.shape).copy(),
            np.broadcast_to(np.asarray(space.high, float), space.shape).copy(),
        )
    finally:
        env.close()


def estimate_ranges(config: RunConfig, base_dir: Path, policy: Policy) -> dict:
    """``{"range": [...], "estimated": [bool...], "low": [...], "high": [...], "episodes": n}``.

    Nominal rollouts are only run when some dimension is unbounded.
    """
    low, high = space_ranges(config, base_dir)
    bounded = np.isfinite(low) & np.isfinite(high)
    lo, hi = low.copy(), high.copy()
    episodes = 0
    if not bounded.all():
        env = make_base_env(config, base_dir)
        seen_lo = np.full(low.shape, np.inf)
        seen_hi = np.full(low.shape, -np.inf)
        limit = config.max_steps or 1000
        try:
            for i in range(config.range_episodes):
                obs, _ = env.reset(seed=episode_seed(config.seed, RANGE_CELL, i))
                for _ in range(limit):
                    obs = np.asarray(obs, float)
                    seen_lo, seen_hi = np.minimum(seen_lo, obs), np.maximum(seen_hi, obs)
                    try:
                        action = _to_action(env.action_space, np.asarray(policy(obs[None]))[0])
                    except OracleFailure:
                        break
                    obs, _, terminated, truncated, _ = env.step(action)
                    if terminated or truncated:
                        seen_lo, seen_hi = np.minimum(seen_lo, obs), np.maximum(seen_hi, obs)
                        break
                episodes += 1
        finally:
            env.close()
        lo = np.where(bounded, low, seen_lo)
        hi = np.where(bounded, high, seen_hi)
    span = hi - lo
    span = np.where(span > 0, span, 1.0)
    return {
        "range": span.tolist(),
        "estimated": (~bounded).tolist(),
        "low": lo.tolist(),
        "high": hi.tolist(),
        "episodes": episodes,
    }
