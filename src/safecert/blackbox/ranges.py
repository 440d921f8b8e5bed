"""Ranges Δ_s of the observation dimensions, for range-scaled observation perturbations.

Noise levels are fractions of Δ_s, so Δ_s decides what "obs_noise = 0.05" means. It comes from
exactly one of three places, recorded in the certificate (``result.obs_ranges.source``):

- ``declared`` — ``[envelope] obs_ranges = [[lo, hi], …]``, one pair per (flattened) observation
  dimension: Δ_s = hi − lo everywhere. Two vendors certified with the same config then receive
  identical noise (same seeds, same Δ_s).
- ``space`` — no ``obs_ranges``: high − low of the observation space; an unbounded dimension is a
  ConfigError naming it (a range scaled by the vendor's own behaviour would make certificates of
  two vendors incomparable).
- ``estimated`` — ``obs_ranges = "estimate"``: bounded dimensions keep the space's bounds,
  unbounded ones take the span max − min (1.0 where it is 0) seen in ``range_episodes`` nominal
  rollouts of the fixed ``reference_policy`` the user names (``"random"``: uniform actions from
  the action space, seeded; or any policy string — never the policy under test), with seeds
  ``SeedSequence(master, spawn_key=(RANGE_CELL, i))`` disjoint from every grid episode.

Declared and space ranges are pure functions of the config and the environment, and ``safecert
verify`` recomputes them; estimated ones are kept in the episode store (its rows digest covers them).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from safecert.blackbox.config import RunConfig
from safecert.blackbox.jobs import RANGE_CELL, episode_seed
from safecert.blackbox.oracles import OracleFailure
from safecert.blackbox.rollout import Policy, make_base_env, to_action
from safecert.errors import ConfigError

RANDOM_REFERENCE = "random"


def space_bounds(space: gym.Space) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) of an observation space, flattened, as floats (±inf where unbounded)."""
    shape = space.shape or ()
    low = np.broadcast_to(np.asarray(getattr(space, "low", -np.inf), float), shape)
    high = np.broadcast_to(np.asarray(getattr(space, "high", np.inf), float), shape)
    return low.reshape(-1).copy(), high.reshape(-1).copy()


def fixed_ranges(config: RunConfig, space: gym.Space) -> dict[str, Any]:
    """Declared (``obs_ranges = [[lo, hi], …]``) or space ranges; ConfigError for an unbounded
    space dimension or a declaration of the wrong length. Not for ``"estimate"``."""
    declared = config.envelope.obs_ranges
    low, high = space_bounds(space)
    if isinstance(declared, list):
        if len(declared) != low.size:
            raise ConfigError(
                f"{len(declared)} [lo, hi] pairs for an observation of {low.size} dimensions "
                f"(shape {space.shape})",
                field="envelope.obs_ranges",
                fix=f"give exactly {low.size} pairs, in the flattened observation's order",
            )
        lo = np.array([p[0] for p in declared], dtype=float)
        hi = np.array([p[1] for p in declared], dtype=float)
        return _ranges(lo, hi, np.zeros(low.size, bool), 0, "declared", None)
    unbounded = np.flatnonzero(~(np.isfinite(low) & np.isfinite(high)))
    if unbounded.size:
        dims = unbounded.tolist()
        shown = f"{dims}" if len(dims) <= 8 else f"{dims[:8]}… ({len(dims)} of {low.size})"
        raise ConfigError(
            f"observation dimensions {shown} are unbounded, so observation noise has no range "
            "to scale",
            field="envelope.obs_ranges",
            fix="declare obs_ranges = [[lo, hi], ...] (one pair per dimension), or ask for "
            'obs_ranges = "estimate" with a reference_policy',
        )
    return _ranges(low, high, np.zeros(low.size, bool), 0, "space", None)


def _ranges(
    lo: np.ndarray,
    hi: np.ndarray,
    estimated: np.ndarray,
    episodes: int,
    source: str,
    reference: str | None,
) -> dict[str, Any]:
    with np.errstate(over="ignore", invalid="ignore"):
        span = hi - lo
    overflow = np.flatnonzero(~np.isfinite(span))
    if overflow.size:
        i = int(overflow[0])
        raise ConfigError(
            f"the {source} range of observation dimension {i}, [{lo[i]:g}, {hi[i]:g}], spans more "
            f"than a float holds ({overflow.size} dimension{'s' * (overflow.size > 1)} like it), "
            "so a noise level (a fraction of the span) would be infinite",
            field="envelope.obs_ranges",
            fix="declare obs_ranges = [[lo, hi], ...] with the range each dimension really takes",
        )
    span = np.where(span > 0, span, 1.0)
    return {
        "range": span.tolist(),
        "estimated": estimated.tolist(),
        "low": lo.tolist(),
        "high": hi.tolist(),
        "episodes": episodes,
        "source": source,
        "reference_policy": reference,
    }


def random_reference(space: gym.Space, seed: int) -> Policy:
    """The ``"random"`` reference policy: uniform actions of ``space``, from ``seed``."""
    if not isinstance(space, gym.spaces.Discrete | gym.spaces.Box):
        raise ConfigError(
            f"'random' draws Discrete or Box actions, not {type(space).__name__}",
            field="envelope.reference_policy",
            fix="name a reference policy string instead",
        )
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(RANGE_CELL,)))

    def act(observations: np.ndarray) -> np.ndarray:
        n = len(observations)
        if isinstance(space, gym.spaces.Discrete):
            return space.start + rng.integers(space.n, size=n)
        assert isinstance(space, gym.spaces.Box)  # for the type checker: refused above
        low = np.asarray(space.low, dtype=np.float64)
        high = np.asarray(space.high, dtype=np.float64)
        low = np.where(np.isfinite(low), low, -1.0)
        high = np.where(np.isfinite(high), high, 1.0)
        return rng.uniform(low, high, size=(n, *space.shape))

    return act


def estimate_ranges(config: RunConfig, base_dir: Path, reference: Policy) -> dict[str, Any]:
    """Ranges with unbounded dimensions estimated from rollouts of ``reference`` (the policy named
    by ``envelope.reference_policy``; the caller builds it). Rollouts run only when some
    dimension is unbounded."""
    env = make_base_env(config, base_dir)
    try:
        low, high = space_bounds(env.observation_space)
        bounded = np.isfinite(low) & np.isfinite(high)
        seen_lo, seen_hi = np.full(low.shape, np.inf), np.full(low.shape, -np.inf)
        episodes = 0
        limit = config.max_steps or 1000
        rule = config.spec.action_out_of_space
        for i in range(config.range_episodes if not bounded.all() else 0):
            obs, _ = env.reset(seed=episode_seed(config.seed, RANGE_CELL, i))
            for _ in range(limit):
                flat = np.asarray(obs, float).reshape(-1)
                seen_lo, seen_hi = np.minimum(seen_lo, flat), np.maximum(seen_hi, flat)
                try:
                    row = np.asarray(reference(np.asarray(obs, float)[None]))[0]
                    action = to_action(env.action_space, row, rule)
                except OracleFailure:
                    break
                obs, _, terminated, truncated, _ = env.step(action)
                if terminated or truncated:
                    flat = np.asarray(obs, float).reshape(-1)
                    seen_lo, seen_hi = np.minimum(seen_lo, flat), np.maximum(seen_hi, flat)
                    break
            episodes += 1
    finally:
        env.close()
    lo = np.where(bounded, low, seen_lo)
    hi = np.where(bounded, high, seen_hi)
    return _ranges(lo, hi, ~bounded, episodes, "estimated", config.envelope.reference_policy)


def run_ranges(
    config: RunConfig,
    base_dir: Path,
    make_reference: Callable[[], tuple[Policy, Callable[[], None]]],
) -> dict[str, Any]:
    """The run's Δ_s: :func:`fixed_ranges`, or :func:`estimate_ranges` with the reference policy
    ``make_reference()`` returns (with its closer) when ``obs_ranges = "estimate"``."""
    if config.envelope.obs_ranges != "estimate":
        env = make_base_env(config, base_dir)
        try:
            return fixed_ranges(config, env.observation_space)
        finally:
            env.close()
    reference, close = make_reference()
    try:
        return estimate_ranges(config, base_dir, reference)
    finally:
        close()
