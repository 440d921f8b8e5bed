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
failure, with the reason recorded; a reply of the wrong shape (kind ``action_shape``) or, under
``spec.action_out_of_space = "fail"``, outside the action space (kind ``action_out_of_space``)
does too. The cost and the goal are the run's spec expressions (:mod:`safecert.blackbox.spec`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any, cast

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from safecert.blackbox.actions import (
    FAIL_KINDS,
    BoxBatch,
    DiscreteBatch,
    action_mismatch,
    failure_kind,
    to_action,
)
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
from safecert.blackbox.oracles.base import CallResult, Calls, call_groups, each_call
from safecert.blackbox.spec import EpisodeSpec, compile_spec, step_scope
from safecert.errors import ConfigError
from safecert.expressions import EvalError

Policy = Callable[[np.ndarray], np.ndarray]

__all__ = [  # the action checks live in safecert.blackbox.actions; their old home still names them
    "FAIL_KINDS",
    "Policy",
    "SpecFailure",
    "action_mismatch",
    "build_cell_env",
    "declared_act_ranges",
    "episode_spec",
    "failure_kind",
    "make_base_env",
    "run_lockstep",
    "to_action",
    "true_observation",
]


def make_base_env(config: RunConfig, base_dir: Path) -> gym.Env:
    from safecert.envs import make_env

    return make_env(config.env, config.env_kwargs, base_dir, trusted=config.trust == "in-process")


def build_cell_env(
    config: RunConfig,
    base_dir: Path,
    params: dict[str, Any],
    obs_ranges: np.ndarray | None,
    policy: Policy,
) -> gym.Env:
    """The environment of one grid cell, wrapped with that cell's perturbations.

    Action perturbations are scaled by ``envelope.act_ranges`` when declared, else by the action
    space's bounds; the L∞ action adversary judges candidates by the run's own ``spec.cost``."""
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
        assert env_.act_noise is not None, "a cell with act_noise comes from [envelope] act_noise"
        kind = env_.act_noise.kind
        act_ranges = declared_act_ranges(config, env.action_space)
        env = (
            ActionAdversary(
                env, level, config.adversary.candidates, episode_spec(config), act_ranges
            )
            if kind == "linf"
            else ActionNoise(env, level, kind, act_ranges)
        )
    level = params.get("obs_noise", 0.0)
    if level > 0:
        assert obs_ranges is not None, "observation ranges are needed for observation noise"
        obs_ranges = np.asarray(obs_ranges, dtype=float).reshape(env.observation_space.shape)
        assert env_.obs_noise is not None, "a cell with obs_noise comes from [envelope] obs_noise"
        kind = env_.obs_noise.kind
        env = (
            ObservationAdversary(env, level, obs_ranges, policy, config.adversary.candidates)
            if kind == "linf"
            else ObservationNoise(env, level, obs_ranges, kind)
        )
    return env


def declared_act_ranges(config: RunConfig, space: gym.Space) -> np.ndarray | None:
    """Δ_a from ``envelope.act_ranges`` (hi − lo per action dimension), or None when undeclared."""
    declared = config.envelope.act_ranges
    if declared is None:
        return None
    shape = getattr(space, "shape", None) or ()
    size = int(np.prod(shape)) if shape else 0
    if not isinstance(space, spaces.Box) or len(declared) != size:
        raise ConfigError(
            f"{len(declared)} [lo, hi] pairs for the action space {space}",
            field="envelope.act_ranges",
            fix=f"give one pair per action dimension ({size})"
            if isinstance(space, spaces.Box)
            else "remove it: only Box action spaces take ranges",
        )
    return np.array([hi - lo for lo, hi in declared], dtype=float).reshape(shape)


def episode_spec(config: RunConfig) -> EpisodeSpec:
    return compile_spec(config.spec.cost, config.spec.goal)


def true_observation(env: gym.Env, observed: np.ndarray) -> np.ndarray:
    """The observation before the outermost observation perturbation (what the spec judges)."""
    clean = getattr(env, "true_obs", None)
    return observed if clean is None else clean


class SpecFailure(Exception):
    """Raised by :func:`run_lockstep` with ``strict=True`` when the spec cannot be evaluated."""

    def __init__(self, field: str, reason: str) -> None:
        self.field, self.reason = field, reason
        super().__init__(f"{field}: {reason}")


class _Episode:
    """Running totals of one live episode."""

    __slots__ = ("job", "obs", "ret", "cost", "steps", "last")

    def __init__(self, job: EpisodeJob, obs: np.ndarray) -> None:
        self.job, self.obs = job, obs
        self.ret = 0.0
        self.cost = 0.0
        self.steps = 0
        self.last: dict[str, Any] = {}


def _check_reads(spec: EpisodeSpec, ep: _Episode, seen_keys: set[Any]) -> None:
    """Strict mode: every ``info["KEY"]`` the spec names was in some step's info, and every
    ``obs[i]``/``action[i]`` it names exists — even on a branch this episode did not take."""
    for field, expr in (("spec.cost", spec.cost), ("spec.goal", spec.goal)):
        for name, key in sorted(expr.subscripts, key=str):
            if name == "info" and key not in seen_keys:
                held = ", ".join(sorted(map(str, seen_keys))[:20]) or "none"
                raise SpecFailure(
                    field,
                    f"info never holds key {key!r} in one nominal episode of {ep.steps} steps "
                    f"(keys it holds: {held})",
                )
            if name in ("obs", "action") and isinstance(key, int) and name in ep.last:
                size = np.asarray(ep.last[name]).shape[:1]
                if not size or not -size[0] <= key < size[0]:
                    raise SpecFailure(
                        field, f"{name}[{key}] is out of range ({name} has shape {size})"
                    )


def run_lockstep(
    envs: Sequence[gym.Env],
    jobs: Sequence[EpisodeJob],
    policy: Policy,
    config: RunConfig,
    *,
    strict: bool = False,
    calls: Calls | None = None,
) -> Iterator[EpisodeRecord]:
    """Run ``jobs`` on the ``len(envs)`` copies in lockstep; yield records as episodes end.

    ``calls``: how a step's observations reach the policy (:data:`Calls`): one oracle call per
    ``config.batch_size`` live rows, all of a step's calls together (one round trip to a policy
    worker); a failed call ends the episodes of its rows only. Without ``calls``, every live row
    goes to ``policy`` in one call. The action checks run once over the whole step when every
    call's reply has one dtype and row shape (the checks are row by row, so the actions are the
    same as checking each call alone).

    A spec that cannot be evaluated (a missing key, an index outside the observation) ends the
    episode as a failure of kind ``spec``; with ``strict`` it raises :class:`SpecFailure`
    instead (the pre-run check of :func:`safecert.blackbox.certify.make_context`)."""
    queue = list(reversed(jobs))
    slots: list[_Episode | None] = [None] * len(envs)
    spec = episode_spec(config)
    rule = config.spec.action_out_of_space
    max_steps = config.max_steps
    if calls is None:
        step_calls: Calls = partial(each_call, policy)
        size = max(1, len(envs))  # every live row in one call
    else:
        step_calls, size = calls, config.batch_size

    seen_keys: set[Any] = set()

    def record(ep: _Episode, terminated: bool, truncated: bool, why: str | None) -> EpisodeRecord:
        goal = False
        if strict and why is None:
            _check_reads(spec, ep, seen_keys)
        if why is None:
            scope = dict(ep.last, episode_return=ep.ret, episode_cost=ep.cost, steps=ep.steps)
            try:
                goal = spec.reached(scope)
            except EvalError as exc:
                if strict:
                    raise SpecFailure(
                        "spec.goal", f"at the end of the episode: {exc.reason}"
                    ) from None
                why = f"spec: spec.goal: {exc.reason}"
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
                obs, _ = envs[i].reset(seed=job.seed)
            except OracleFailure as exc:
                yield record(_Episode(job, np.empty(0)), False, False, exc.reason)
                continue
            slots[i] = _Episode(job, obs)
            return
        slots[i] = None

    for i in range(len(envs)):
        yield from fill(i)
    space = envs[0].action_space  # copies of one cell's environment share it: checked per batch
    shared = all(env.action_space == space for env in envs[1:])
    box = BoxBatch(space) if shared and isinstance(space, spaces.Box) else None
    discrete = DiscreteBatch(space) if shared and isinstance(space, spaces.Discrete) else None

    def accept(actions: np.ndarray) -> Sequence[Any] | None:
        """The rows as actions when every one already is an action of the space (no per-row
        check needed: the same actions either way), else None."""
        if box is not None and box.ok(actions):
            return cast(Sequence[Any], actions)
        if discrete is not None:
            return discrete.actions(actions)
        return None

    while True:
        running = [(i, ep) for i, ep in enumerate(slots) if ep is not None]
        if not running:
            return
        n = len(running)
        batch = (  # the observations as float64 rows, converted once for the whole step
            np.asarray(running[0][1].obs, dtype=np.float64)[None]
            if n == 1
            else np.array([ep.obs for _, ep in running], dtype=np.float64)
        )
        results = step_calls(batch, size)
        raw, accepted, failed = _step_actions(results, n, size, accept)
        for row, (i, ep) in enumerate(running):
            env = envs[i]
            if failed is not None and failed[row] is not None:
                yield record(ep, False, False, failed[row])
                yield from fill(i)
                continue
            try:
                action = (
                    accepted[row]
                    if accepted is not None and accepted[row] is not _UNCHECKED
                    else to_action(env.action_space, raw[row], rule)
                )
                obs, reward, terminated, truncated, info = env.step(action)
                reward = float(reward)
                ep.last = step_scope(
                    true_observation(env, obs),
                    action,
                    reward,
                    info,
                    terminated,
                    truncated,
                    ep.steps,
                )
                if strict:
                    seen_keys.update(info)
                cost = spec.step_cost(ep.last)
            except OracleFailure as exc:
                yield record(ep, False, False, exc.reason)
                yield from fill(i)
                continue
            except EvalError as exc:
                if strict:
                    raise SpecFailure(
                        "spec.cost", f"at step {ep.steps + 1}: {exc.reason}"
                    ) from None
                yield record(ep, False, False, f"spec: spec.cost: {exc.reason}")
                yield from fill(i)
                continue
            ep.steps += 1
            ep.ret += reward
            ep.cost += cost
            ep.obs = obs
            if max_steps is not None and ep.steps >= max_steps and not terminated:
                truncated = True
                ep.last["truncated"] = True
            if terminated or truncated:
                yield record(ep, bool(terminated), bool(truncated), None)
                yield from fill(i)


#: a row whose call's reply was not accepted whole: :func:`to_action` judges it alone
_UNCHECKED = object()


def _step_actions(
    results: np.ndarray | list[CallResult],
    n: int,
    size: int,
    accept: Callable[[np.ndarray], Sequence[Any] | None],
) -> tuple[Any, Sequence[Any] | None, list[str | None] | None]:
    """One step's replies as rows: (raw rows, accepted actions or None, per-row failure reasons
    or None).

    Stacked replies (every call answered alike, :func:`~safecert.blackbox.oracles.base.stacked`)
    are checked at once (``accept``); otherwise call by call, and a failed call (or a reply with
    the wrong number of rows) fails the rows it held."""
    if isinstance(results, np.ndarray):
        if results.ndim and results.shape[0] == n:
            return results, accept(results), None
        results = [results]  # one call's reply with the wrong number of rows
    groups = call_groups(n, size)
    if len(results) != len(groups):
        raise AssertionError(f"{len(results)} replies for {len(groups)} calls")
    raw: list[Any] = [None] * n
    accepted: list[Any] = [_UNCHECKED] * n
    failed: list[str | None] = [None] * n
    for rows, result in zip(groups, results, strict=True):
        if isinstance(result, np.ndarray) and (result.ndim == 0 or result.shape[0] != len(rows)):
            result = OracleFailure(f"expected {len(rows)} action rows, got shape {result.shape}")
        if isinstance(result, OracleFailure):
            failed[rows.start : rows.stop] = [result.reason] * len(rows)
            continue
        ok = accept(result)
        for j, row in enumerate(rows):
            raw[row] = result[j]
            if ok is not None:
                accepted[row] = ok[j]
    return raw, accepted, failed
