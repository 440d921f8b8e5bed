"""The certification envelope E(σ_s, σ_a) as Gymnasium wrappers, one idea each (docs/methods.md §2).

- :class:`ObservationNoise` — s̃ = s + σ_s·Δ_s ⊙ ξ, ξ ~ N(0, I) or U[−1, 1]^d;
- :class:`ActionNoise` — ã = clip(a + σ_a·Δ_a ⊙ ξ); discrete spaces: a uniformly random action
  with probability σ_a;
- :class:`ActionDelay` — the action executed at step t is the one chosen at t − Δ;
- :class:`PhysicalShift` — deterministic mass / friction / damping scales;
- :class:`RandomDynamics` — fresh scales drawn from U[1 − ρ, 1 + ρ] at every reset;
- :class:`LayoutRandomization` — a fresh layout at every reset (tasks with ``randomize_layout``);
- the bounded black-box L∞ adversaries live in :mod:`safecert.blackbox.adversary`.

Δ is the per-dimension range: declared in ``[envelope]`` (``obs_ranges``, ``act_ranges``), else
high − low of the space; unbounded observation dimensions may be estimated from a named reference
policy's rollouts when asked for (:mod:`safecert.blackbox.ranges`). ``ObservationNoise`` keeps the
unperturbed observation in ``true_obs``: the spec judges the world, not what the policy saw. Each wrapper draws its
randomness from its own ``numpy`` Generator, re-seeded at ``reset(seed=s)`` from
``SeedSequence(s, spawn_key=(tag,))``, so an episode's noise depends only on its seed. Each records
what it changed (``applied``: how many perturbations; ``last``: the last one) so tests can prove
that the perturbation reached the policy or the simulator. Invalid arguments raise ConfigError.

Example::

    env = ObservationNoise(gym.make("Pendulum-v1"), level=0.05, ranges=np.array([2.0, 2.0, 16.0]))
    obs, _ = env.reset(seed=3)          # obs already carries noise; env.applied == 1
"""

from __future__ import annotations

from collections import deque
from typing import Any, Literal, cast

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from safecert.errors import ConfigError

NoiseKind = Literal["gaussian", "uniform"]


def _check_level(level: float, field: str) -> float:
    if not (0.0 <= float(level) <= 1.0):
        raise ConfigError(f"level {level} is outside [0, 1]", field=field)
    return float(level)


def box_range(space: gym.Space, field: str) -> np.ndarray:
    """high − low of a bounded Box, per dimension (ConfigError for other spaces)."""
    if not isinstance(space, spaces.Box):
        raise ConfigError(f"needs a Box space, got {type(space).__name__}", field=field)
    span = np.asarray(space.high, dtype=float) - np.asarray(space.low, dtype=float)
    if not np.all(np.isfinite(span)):
        raise ConfigError(
            "the space has unbounded dimensions",
            field=field,
            fix="declare the ranges in [envelope] (obs_ranges / act_ranges = [[lo, hi], ...])",
        )
    return span


class SeededWrapper(gym.Wrapper):
    """A wrapper with its own Generator, re-seeded from the episode seed at ``reset``."""

    tag: int = 0

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.rng = np.random.default_rng(np.random.SeedSequence(0, spawn_key=(self.tag,)))
        self.applied = 0
        self.last: Any = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is not None:
            self.rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(self.tag,)))
        self.before_reset()
        return self.env.reset(seed=seed, options=options)

    def before_reset(self) -> None:
        """Hook for wrappers that change the simulator between episodes."""


def draw(rng: np.random.Generator, kind: str, shape: tuple[int, ...]) -> np.ndarray:
    if kind == "gaussian":
        return rng.standard_normal(shape)
    if kind == "uniform":
        return rng.uniform(-1.0, 1.0, shape)
    raise ConfigError(f"unknown noise kind {kind!r}", field="kind", fix="use gaussian or uniform")


class ObservationNoise(SeededWrapper):
    """Perceptual noise s̃ = s + level·ranges ⊙ ξ (CORE-RL's perceptual deviation f_s)."""

    tag = 1

    def __init__(
        self, env: gym.Env, level: float, ranges: np.ndarray, kind: NoiseKind = "gaussian"
    ) -> None:
        super().__init__(env)
        self.level = _check_level(level, "envelope.obs_noise.levels")
        self.kind = kind
        self.ranges = np.asarray(ranges, dtype=float)
        if self.ranges.shape != env.observation_space.shape or not np.all(np.isfinite(self.ranges)):
            raise ConfigError(
                f"ranges of shape {self.ranges.shape} do not match the observation "
                f"space {env.observation_space.shape}",
                field="obs_ranges",
            )
        draw(self.rng, kind, (1,))  # validates kind

    def _perturb(self, obs: np.ndarray) -> np.ndarray:
        noise = self.level * self.ranges * draw(self.rng, self.kind, self.ranges.shape)
        self.applied += 1
        self.last = noise
        self.true_obs = np.asarray(obs, dtype=float)
        return self.true_obs + noise

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = super().reset(seed=seed, options=options)
        return self._perturb(obs), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._perturb(obs), reward, terminated, truncated, info


class ActionNoise(SeededWrapper):
    """Actuation noise ã = clip(a + level·Δ_a ⊙ ξ); Discrete: random action w.p. ``level``.

    Δ_a is ``ranges`` when given (declared ``envelope.act_ranges``), else the Box's high − low."""

    tag = 2

    def __init__(
        self,
        env: gym.Env,
        level: float,
        kind: NoiseKind = "gaussian",
        ranges: np.ndarray | None = None,
    ) -> None:
        super().__init__(env)
        self.level = _check_level(level, "envelope.act_noise.levels")
        self.kind = kind
        space = env.action_space
        if isinstance(space, spaces.Discrete):
            self.ranges = None
        else:
            self.ranges = action_ranges(space, ranges, "envelope.act_noise")
            draw(self.rng, kind, (1,))

    def step(self, action):
        space = self.env.action_space
        if isinstance(space, spaces.Discrete):
            if self.rng.random() < self.level:
                new = int(space.start + self.rng.integers(space.n))
                self.applied += int(new != int(action))
                self.last = new
                action = new
        else:
            noise = self.level * self.ranges * draw(self.rng, self.kind, self.ranges.shape)
            self.applied += 1
            self.last = noise
            action = np.clip(np.asarray(action, dtype=float) + noise, space.low, space.high)
        return self.env.step(action)


def action_ranges(space: gym.Space, declared: np.ndarray | None, field: str) -> np.ndarray:
    """Δ_a: the declared ranges when given (their shape must be the Box's), else high − low."""
    if declared is None:
        return box_range(space, field)
    declared = np.asarray(declared, dtype=float)
    if not isinstance(space, spaces.Box) or declared.shape != space.shape:
        raise ConfigError(
            f"declared ranges of shape {declared.shape} do not match {space}",
            field="envelope.act_ranges",
        )
    return declared


def noop_action(space: gym.Space) -> Any:
    """The action executed before the first delayed one arrives: 0 clipped into the space."""
    if isinstance(space, spaces.Discrete):
        return int(space.start)
    box = cast(spaces.Box, space)
    return np.clip(np.zeros(box.shape), box.low, box.high)


class ActionDelay(gym.Wrapper):
    """Latency of ``delay`` steps: the env executes the action chosen ``delay`` steps earlier.

    The first ``delay`` steps execute :func:`noop_action`. ``delay = 0`` is the identity.
    """

    def __init__(self, env: gym.Env, delay: int) -> None:
        super().__init__(env)
        if int(delay) != delay or delay < 0:
            raise ConfigError(
                f"delay {delay} is not a non-negative integer", field="envelope.delay.levels"
            )
        self.delay = int(delay)
        self.queue: deque = deque()
        self.applied = 0
        self.last: Any = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self.queue = deque([noop_action(self.env.action_space)] * self.delay)
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        self.queue.append(action)
        executed = self.queue.popleft()
        self.applied += int(self.delay > 0)
        self.last = executed
        return self.env.step(executed)


class DynamicsHandle:
    """Read/write access to one physical quantity (mass, friction, damping) of a simulator.

    MuJoCo envs (``unwrapped.model``): ``body_mass``, ``geom_friction``, ``dof_damping`` arrays.
    Other envs: a numeric attribute of that name on ``unwrapped`` (the point task's ``mass`` and
    ``friction``). Anything else is a ConfigError naming the quantity.
    """

    MUJOCO = {"mass": "body_mass", "friction": "geom_friction", "damping": "dof_damping"}

    def __init__(self, env: gym.Env, name: str, field: str) -> None:
        base = env.unwrapped
        model = getattr(base, "model", None)
        if model is not None and hasattr(model, self.MUJOCO[name]):
            self._owner, self._attr = model, self.MUJOCO[name]
        elif isinstance(getattr(base, name, None), int | float):
            self._owner, self._attr = base, name
        else:
            raise ConfigError(
                f"environment {env.spec.id if env.spec else type(base).__name__} "
                f"has no {name!r} to shift",
                field=field,
            )
        self.nominal = np.array(getattr(self._owner, self._attr), dtype=float, copy=True)

    def get(self) -> np.ndarray:
        return np.array(getattr(self._owner, self._attr), dtype=float)

    def set_scale(self, scale: float) -> None:
        value = self.nominal * scale
        if isinstance(getattr(self._owner, self._attr), np.ndarray):
            getattr(self._owner, self._attr)[...] = value
        else:
            setattr(self._owner, self._attr, float(value))


class PhysicalShift(gym.Wrapper):
    """Deterministic shift: each quantity multiplied by its scale, once, at construction."""

    def __init__(self, env: gym.Env, **scales: float) -> None:
        super().__init__(env)
        self.applied: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for name, scale in scales.items():
            if name not in DynamicsHandle.MUJOCO:
                raise ConfigError(
                    f"unknown quantity {name!r}",
                    field="envelope.dynamics",
                    fix="use mass, friction or damping",
                )
            if not scale > 0:
                raise ConfigError(f"scale {scale} must be > 0", field=f"envelope.dynamics.{name}")
            if scale == 1.0:
                continue
            handle = DynamicsHandle(env, name, f"envelope.dynamics.{name}")
            handle.set_scale(scale)
            self.applied[name] = (handle.nominal, handle.get())


class RandomDynamics(SeededWrapper):
    """Per-episode randomised dynamics at level ρ: every available quantity (mass, friction,
    damping) is scaled by its own factor drawn from U[1 − ρ, 1 + ρ] at each reset (relative to the
    values at construction, so shifts do not accumulate)."""

    tag = 3

    def __init__(self, env: gym.Env, level: float) -> None:
        super().__init__(env)
        self.level = _check_level(level, "envelope.random_dynamics.levels")
        self.handles: dict[str, DynamicsHandle] = {}
        for name in DynamicsHandle.MUJOCO:
            try:
                self.handles[name] = DynamicsHandle(env, name, "envelope.random_dynamics")
            except ConfigError:
                continue
        if not self.handles:
            raise ConfigError(
                "the environment exposes no mass, friction or damping",
                field="envelope.random_dynamics",
            )

    def before_reset(self) -> None:
        factors = {n: float(self.rng.uniform(1 - self.level, 1 + self.level)) for n in self.handles}
        for name, factor in factors.items():
            self.handles[name].set_scale(factor)
        self.applied += 1
        self.last = factors


class LayoutRandomization(SeededWrapper):
    """A fresh layout at every reset, drawn by ``unwrapped.randomize_layout(rng)``."""

    tag = 4

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        if not callable(getattr(env.unwrapped, "randomize_layout", None)):
            raise ConfigError(
                "the environment has no layouts (no randomize_layout method)",
                field="envelope.layout",
            )

    def before_reset(self) -> None:
        self.last = cast(Any, self.env.unwrapped).randomize_layout(self.rng)
        self.applied += 1
