"""Bounded black-box L∞ adversaries (no gradients), on observations or on actions.

Both pick, at every step, one perturbation δ with ‖δ / Δ‖∞ ≤ k (Δ: per-dimension range) among
``candidates`` corners of the box — sign vectors drawn from the wrapper's seeded Generator (all
2^d corners when 2^d ≤ candidates) — by a *damage proxy*:

- :class:`ObservationAdversary` — the corner that changes the policy's action the most,
  ``argmax_δ ‖π(s + δ) − π(s)‖₂`` (discrete actions: whether the action changes). Query cost per
  step: one extra oracle call of ``candidates + 1`` observations (then the rollout's own call on
  the chosen s + δ).
- :class:`ActionAdversary` — one-step lookahead on a copy of the simulator: the corner whose
  execution gives the largest ``cost − reward`` on the next step. No oracle queries; ``candidates``
  simulator steps per step (MuJoCo: state saved and restored; other envs: a deep copy per
  candidate). Box action spaces only.

Ties go to the first candidate. ``applied`` counts perturbed steps, ``last`` is the last δ.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any, cast

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from safecert.blackbox.envelope import SeededWrapper, _check_level, action_ranges
from safecert.blackbox.spec import EpisodeSpec, step_scope
from safecert.errors import ConfigError
from safecert.expressions import EvalError


def corner_signs(rng: np.random.Generator, dim: int, candidates: int) -> np.ndarray:
    """``(C, dim)`` sign vectors: every corner when 2^dim ≤ candidates, else ``candidates`` random ones."""
    if candidates < 1:
        raise ConfigError(f"{candidates} candidates", field="adversary.candidates", fix="use >= 1")
    if dim <= 20 and 2**dim <= candidates:
        bits = (np.arange(2**dim)[:, None] >> np.arange(dim)[None, :]) & 1
        return 2.0 * bits - 1.0
    return rng.choice([-1.0, 1.0], size=(candidates, dim))


class ObservationAdversary(SeededWrapper):
    """L∞ adversary on observations, bounded by ``level``·ranges, damage = change of the action."""

    tag = 5

    def __init__(
        self,
        env: gym.Env,
        level: float,
        ranges: np.ndarray,
        policy: Callable[[np.ndarray], np.ndarray],
        candidates: int = 8,
    ) -> None:
        super().__init__(env)
        self.level = _check_level(level, "envelope.obs_noise.levels")
        self.ranges = np.asarray(ranges, dtype=float)
        if self.ranges.shape != env.observation_space.shape:
            raise ConfigError("ranges do not match the observation space", field="obs_ranges")
        self.policy = policy
        self.candidates = int(candidates)
        self.queries = 0

    def _attack(self, obs: np.ndarray) -> np.ndarray:
        obs = np.asarray(obs, dtype=float)
        if self.level == 0.0:
            return obs
        signs = corner_signs(self.rng, obs.size, self.candidates).reshape(-1, *obs.shape)
        deltas = self.level * self.ranges * signs
        batch = np.concatenate([obs[None], obs[None] + deltas])
        actions = np.asarray(self.policy(batch), dtype=float).reshape(len(batch), -1)
        self.queries += len(batch)
        damage = np.linalg.norm(actions[1:] - actions[0], axis=1)
        best = int(np.argmax(damage))
        self.applied += 1
        self.last = deltas[best]
        self.true_obs = obs
        return obs + deltas[best]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = super().reset(seed=seed, options=options)
        return self._attack(obs), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._attack(obs), reward, terminated, truncated, info


class _Snapshot:
    """Save/restore the simulator for lookahead: MuJoCo state, or a deep copy of the env."""

    def __init__(self, base: gym.Env) -> None:
        self.base = base
        self.mujoco = hasattr(base, "data") and hasattr(base, "set_state")

    def try_step(self, action: np.ndarray) -> tuple[Any, float, bool, bool, dict]:
        if self.mujoco:
            base = cast(Any, self.base)  # a MuJoCo env: data and set_state exist (checked above)
            data = base.data
            saved = (
                data.qpos.copy(),
                data.qvel.copy(),
                data.act.copy(),
                float(data.time),
                data.qacc_warmstart.copy(),
            )
            obs, reward, terminated, truncated, info = self.base.step(action)
            data.act[:] = saved[2]
            data.qacc_warmstart[:] = saved[4]
            base.set_state(saved[0], saved[1])
            data.time = saved[3]
            return obs, float(reward), terminated, truncated, info
        obs, reward, terminated, truncated, info = copy.deepcopy(self.base).step(action)
        return obs, float(reward), terminated, truncated, info


class ActionAdversary(SeededWrapper):
    """L∞ adversary on actions, bounded by ``level``·Δ_a, damage = one-step ``cost − reward``.

    The cost is the run's ``spec.cost`` on the candidate step (``spec``; a candidate whose cost
    cannot be evaluated scores as the worst, +inf); without a spec, damage is ``−reward``.
    Δ_a is ``ranges`` when declared, else the Box's high − low."""

    tag = 6

    def __init__(
        self,
        env: gym.Env,
        level: float,
        candidates: int = 8,
        spec: EpisodeSpec | None = None,
        ranges: np.ndarray | None = None,
    ) -> None:
        super().__init__(env)
        self.level = _check_level(level, "envelope.act_noise.levels")
        if not isinstance(env.action_space, spaces.Box):
            raise ConfigError(
                "the L∞ action adversary needs a Box action space",
                field="envelope.act_noise.kind",
                fix="use gaussian/uniform (random action)",
            )
        self.ranges = action_ranges(env.action_space, ranges, "envelope.act_noise")
        self.candidates = int(candidates)
        self.cost_spec = spec
        self.lookahead = _Snapshot(env.unwrapped)
        self.simulations = 0

    def step(self, action):
        space = self.env.action_space
        action = np.asarray(action, dtype=float).reshape(space.shape)
        if self.level > 0.0:
            signs = corner_signs(self.rng, action.size, self.candidates).reshape(-1, *space.shape)
            cands = np.clip(action[None] + self.level * self.ranges * signs, space.low, space.high)
            damage = []
            for cand in cands:
                obs, reward, terminated, truncated, info = self.lookahead.try_step(cand)
                damage.append(self._cost(obs, cand, reward, info, terminated, truncated) - reward)
            self.simulations += len(cands)
            chosen = cands[int(np.argmax(damage))]
            self.applied += 1
            self.last = chosen - action
            action = chosen
        return self.env.step(action)

    def _cost(
        self, obs: Any, action: Any, reward: float, info: dict, term: bool, trunc: bool
    ) -> float:
        if self.cost_spec is None:
            return 0.0
        try:
            return self.cost_spec.step_cost(step_scope(obs, action, reward, info, term, trunc, 0))
        except EvalError:
            return math.inf
