"""SafePointGoal-v0: a 2-D point robot that must reach a goal among circular hazards (NumPy).

Modelled on Safety-Gymnasium's PointGoal tasks, small enough to read in one sitting and fast enough
to run thousands of episodes on a laptop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from safecert.errors import ConfigError


@dataclass(frozen=True)
class PointLayout:
    """Where things are: the start, the goal and the hazard centres (all in the arena frame)."""

    start: np.ndarray  # (2,)
    goal: np.ndarray  # (2,)
    hazards: np.ndarray  # (n_hazards, 2)


class SafePointGoalEnv(gym.Env[np.ndarray, np.ndarray]):
    """Point robot with force-controlled velocity dynamics, a goal and circular hazards.

    Dynamics (explicit, per step of ``dt`` seconds): ``v <- v + dt * (force_scale * a - friction *
    v) / mass``, speed clipped to ``max_speed``, ``p <- p + dt * v``, clipped to the square arena
    ``[-arena, arena]^2`` (the velocity component into a wall is zeroed). Actions ``a`` are forces in
    ``[-1, 1]^2`` (clipped).

    Observation (float64, ``6 + 2 * n_hazards`` values): position (2), velocity (2), goal minus
    position (2), then each hazard centre minus position (2 each). Hazards have radius
    ``hazard_radius``; the goal is reached when within ``goal_radius``.

    Per step: ``info["cost"] = 1.0`` while the robot is strictly inside any hazard, else ``0.0``;
    ``info["is_success"]`` is True once the goal is reached, which also terminates the episode.
    Reward: distance progress towards the goal, plus 1 on reaching it.

    Layouts: ``layout_seed`` (int) fixes the layout for every episode; ``layout_seed=None`` draws a
    fresh layout from the environment's ``np_random`` on every ``reset``. The first hazard is always
    placed near the straight start-goal segment, so the task is not solved by driving straight.
    The start position gets a uniform jitter of ``start_jitter`` per coordinate at each reset
    (seeded by ``reset(seed=...)``), so episodes with different seeds differ.

    Attributes for physical shifts and layout randomisation (safecert's envelope wrappers use them):
    ``mass``, ``friction`` (linear drag coefficient) and ``force_scale`` may be changed between
    episodes; ``layout`` is the current :class:`PointLayout`; ``randomize_layout(rng)`` draws a new
    one from a ``numpy.random.Generator`` and keeps it for the following resets (call it *before*
    ``reset``).

    Example::

        import gymnasium as gym, safecert.envs
        env = gym.make("SafePointGoal-v0", layout_seed=3)
        obs, info = env.reset(seed=0)
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        info["cost"], info["is_success"]
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        *,
        layout_seed: int | None = 0,
        n_hazards: int = 4,
        hazard_radius: float = 0.3,
        goal_radius: float = 0.3,
        arena: float = 2.0,
        dt: float = 0.1,
        mass: float = 1.0,
        friction: float = 0.5,
        force_scale: float = 1.0,
        max_speed: float = 2.0,
        start_jitter: float = 0.1,
    ) -> None:
        for name, value in (
            ("hazard_radius", hazard_radius),
            ("goal_radius", goal_radius),
            ("arena", arena),
            ("dt", dt),
            ("mass", mass),
            ("max_speed", max_speed),
        ):
            if not value > 0:
                raise ConfigError(f"must be > 0 (got {value})", field=f"env_kwargs.{name}")
        if n_hazards < 1:
            raise ConfigError(f"must be >= 1 (got {n_hazards})", field="env_kwargs.n_hazards")
        if friction < 0 or start_jitter < 0:
            raise ConfigError("must be >= 0", field="env_kwargs.friction/start_jitter")
        self.layout_seed = layout_seed
        self.n_hazards = int(n_hazards)
        self.hazard_radius = float(hazard_radius)
        self.goal_radius = float(goal_radius)
        self.arena = float(arena)
        self.dt = float(dt)
        self.mass = float(mass)
        self.friction = float(friction)
        self.force_scale = float(force_scale)
        self.max_speed = float(max_speed)
        self.start_jitter = float(start_jitter)
        self.action_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float64)
        span = 2 * self.arena
        high = np.array([self.arena] * 2 + [self.max_speed] * 2 + [span] * (2 + 2 * n_hazards))
        self.observation_space = spaces.Box(-high, high, dtype=np.float64)
        seed = 0 if layout_seed is None else layout_seed
        self.layout = sample_layout(np.random.default_rng(seed), self)
        self._pos = self.layout.start.copy()
        self._vel = np.zeros(2)

    def randomize_layout(self, rng: np.random.Generator) -> PointLayout:
        """Draw a new layout from ``rng`` and keep it for the following resets."""
        self.layout = sample_layout(rng, self)
        return self.layout

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if self.layout_seed is None:
            self.layout = sample_layout(self.np_random, self)
        jitter = self.np_random.uniform(-self.start_jitter, self.start_jitter, size=2)
        self._pos = np.clip(self.layout.start + jitter, -self.arena, self.arena)
        self._vel = np.zeros(2)
        return self._obs(), {"cost": 0.0, "is_success": False}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        a = np.clip(np.asarray(action, dtype=np.float64).reshape(2), -1.0, 1.0)
        before = float(np.linalg.norm(self.layout.goal - self._pos))
        accel = (self.force_scale * a - self.friction * self._vel) / self.mass
        vel = self._vel + self.dt * accel
        speed = float(np.linalg.norm(vel))
        if speed > self.max_speed:
            vel *= self.max_speed / speed
        pos = self._pos + self.dt * vel
        hit = np.abs(pos) > self.arena
        pos = np.clip(pos, -self.arena, self.arena)
        vel[hit] = 0.0
        self._pos, self._vel = pos, vel
        after = float(np.linalg.norm(self.layout.goal - pos))
        success = after < self.goal_radius
        cost = float(in_hazard(pos, self.layout.hazards, self.hazard_radius))
        reward = before - after + (1.0 if success else 0.0)
        info = {"cost": cost, "is_success": bool(success)}
        return self._obs(), reward, bool(success), False, info

    def _obs(self) -> np.ndarray:
        rel = (self.layout.hazards - self._pos).reshape(-1)
        return np.concatenate([self._pos, self._vel, self.layout.goal - self._pos, rel])


def in_hazard(pos: np.ndarray, hazards: np.ndarray, radius: float) -> bool:
    """True iff ``pos`` is strictly inside some hazard disc."""
    return bool(np.any(np.linalg.norm(hazards - pos, axis=1) < radius))


def sample_layout(rng: np.random.Generator, env: SafePointGoalEnv) -> PointLayout:
    """Rejection-sample a layout: start and goal >= arena apart, hazards clear of both.

    Hazard 0 is centred on the start-goal segment (at 35-65 % of the way, offset sideways by at most
    a third of its radius), the others are uniform in the arena; no hazard overlaps the goal disc or
    the start jitter box, and hazards do not overlap each other.
    """
    lim = env.arena - max(env.goal_radius, env.hazard_radius)
    clear_start = env.hazard_radius + env.start_jitter * np.sqrt(2) + 0.05
    clear_goal = env.hazard_radius + env.goal_radius + 0.05
    for _ in range(10_000):
        start = rng.uniform(-lim, lim, size=2)
        goal = rng.uniform(-lim, lim, size=2)
        if np.linalg.norm(goal - start) < env.arena:
            continue
        direction = (goal - start) / np.linalg.norm(goal - start)
        normal = np.array([-direction[1], direction[0]])
        t = rng.uniform(0.35, 0.65)
        offset = rng.uniform(-1, 1) * env.hazard_radius / 3
        hazards = [start + t * (goal - start) + offset * normal]
        tries = 0
        while len(hazards) < env.n_hazards and tries < 1000:
            tries += 1
            h = rng.uniform(-lim, lim, size=2)
            if (
                np.linalg.norm(h - start) > clear_start
                and np.linalg.norm(h - goal) > clear_goal
                and all(np.linalg.norm(h - o) > 2 * env.hazard_radius for o in hazards)
            ):
                hazards.append(h)
        first_ok = (
            np.linalg.norm(hazards[0] - start) > clear_start
            and np.linalg.norm(hazards[0] - goal) > clear_goal
        )
        if len(hazards) == env.n_hazards and first_ok:
            return PointLayout(start=start, goal=goal, hazards=np.array(hazards))
    raise ConfigError(
        "cannot place the hazards in the arena", field="env_kwargs", fix="use fewer/smaller hazards"
    )
