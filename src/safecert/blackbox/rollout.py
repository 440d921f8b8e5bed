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

Per step the loop does only what a step needs: a copy made by ``gym.make`` is stepped below its
pass-through layers once they have checked what they check, with the time limit applied here
(:class:`_Layers`); a ``spec.cost`` that reads one ``info`` key is read without building the
step's scope (``EpisodeSpec.info_read``); the scope the goal reads is built once, at the
episode's last step. Same calls, same values, same records (tests/blackbox/test_step_path.py,
and the committed digests of tests/blackbox/test_rollout_digest.py).
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any, cast

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.wrappers import OrderEnforcing, PassiveEnvChecker, TimeLimit

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
from safecert.blackbox.oracles.base import (
    CallResult,
    Calls,
    PostCalls,
    Reply,
    call_groups,
    each_call,
)
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


#: a step count no episode reaches: the limit of an episode without one
_NEVER = sys.maxsize


class SpecFailure(Exception):
    """Raised by :func:`run_lockstep` with ``strict=True`` when the spec cannot be evaluated."""

    def __init__(self, field: str, reason: str) -> None:
        self.field, self.reason = field, reason
        super().__init__(f"{field}: {reason}")


class _Episode:
    """Running totals of one live episode, and how it steps its environment copy: ``step``
    (:meth:`_Layers.attach`), ``horizon`` (the time limit the rollout applies itself, or
    :data:`_NEVER`) and ``observer``, the wrapper holding the true observation (or None)."""

    __slots__ = ("job", "obs", "ret", "cost", "steps", "last", "step", "horizon", "observer")

    def __init__(
        self,
        job: EpisodeJob,
        obs: np.ndarray,
        step: Callable[[Any], tuple],
        observer: Any = None,
    ) -> None:
        self.job, self.obs = job, obs
        self.ret = 0.0
        self.cost = 0.0
        self.steps = 0
        self.last: dict[str, Any] = {}
        self.step = step
        self.horizon = _NEVER
        self.observer = observer


class _Layers:
    """``gym.make``'s own outer layers of one environment copy, stepped past where that changes
    nothing: ``TimeLimit`` (truncates at ``horizon`` steps after a reset), ``OrderEnforcing``
    (refuses a step before the first reset) and ``PassiveEnvChecker`` (checks the first reset
    and the first two steps of the copy, then passes every call through), outermost first, each
    optional, matched by exact type.

    The rollout resets every episode through the whole chain (so every reset is enforced,
    checked and restarts the time limit) and applies ``horizon`` itself exactly as ``TimeLimit``
    does (``truncated`` is true on the step that reaches it, before the step's cost is
    evaluated). :meth:`attach` gives an episode the whole chain's ``step`` until the checker has
    checked its steps — within the copy's first episode, after its second step — and the step
    of the environment below the layers from then on: the same calls with the same results,
    without three Python calls a step. An environment with anything else on the outside (an
    envelope wrapper, a remote or user-built environment) is stepped whole."""

    __slots__ = ("env", "inner", "checker", "horizon")

    def __init__(self, env: gym.Env) -> None:
        self.env = env
        self.horizon: int | None = None
        self.checker: PassiveEnvChecker | None = None
        inner = env
        if type(inner) is TimeLimit:
            self.horizon = inner._max_episode_steps
            inner = inner.env
        if type(inner) is OrderEnforcing:
            inner = inner.env
        if type(inner) is PassiveEnvChecker:
            self.checker = inner
            inner = inner.env
        self.inner = inner if inner is not env else None

    def _checked(self) -> bool:
        checker = self.checker
        return checker is None or (checker.checked_step and checker.checked_data_reuse)

    def attach(self, ep: _Episode) -> None:
        """Set ``ep.step`` and ``ep.horizon`` for the episode just reset through the whole
        chain: the layers' own step while the checker has steps to check (switching to the step
        below them once it has), else the step below them."""
        inner = self.inner
        if self.horizon is not None:
            ep.horizon = self.horizon
        if inner is None:
            ep.step = self.env.step
            return
        if self._checked():
            ep.step = inner.step
            return
        whole, below = self.env.step, inner.step

        def checking(action: Any) -> tuple:
            out = whole(action)
            if self._checked():  # from the next step on, past the layers
                ep.step = below
            return out

        ep.step = checking


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
    post: PostCalls | None = None,
    ahead: bool = True,
) -> Iterator[EpisodeRecord]:
    """Run ``jobs`` on the ``len(envs)`` copies in lockstep; yield records as episodes end.

    ``calls``: how a step's observations reach the policy (:data:`Calls`): one oracle call per
    ``config.batch_size`` live rows, all of a step's calls together (one round trip to a policy
    worker); a failed call ends the episodes of its rows only. Without ``calls``, every live row
    goes to ``policy`` in one call. The action checks run once over the whole step when every
    call's reply has one dtype and row shape (the checks are row by row, so the actions are the
    same as checking each call alone).

    ``post`` (:data:`PostCalls`, a lone run's policy worker): the copies are stepped in two
    halves of whole calls, in turn, one round trip a half. ``ahead`` (the worker has a CPU of its
    own): each half's calls are posted as soon as its step is done and read when the other
    half's step is done, so the policy answers one half while the environments of the other
    step; the same requests in the same order as without ``ahead`` (and a request behind a
    failed one goes to a fresh worker, :meth:`safecert.isolation.Channel.post`), so the records
    are the same either way, whatever the load. Against whole steps (no ``post``) the records
    are the same for a policy whose rows are independent and whose worker never fails a round
    trip (a crash fails the calls of its round trip: a half's here).

    A spec that cannot be evaluated (a missing key, an index outside the observation) ends the
    episode as a failure of kind ``spec``; with ``strict`` it raises :class:`SpecFailure`
    instead (the pre-run check of :func:`safecert.blackbox.certify.make_context`)."""
    queue = list(reversed(jobs))
    slots: list[_Episode | None] = [None] * len(envs)
    layers = [_Layers(env) for env in envs]
    spec = episode_spec(config)
    cost_key, cost_default = spec.info_read or (None, None)
    rule = config.spec.action_out_of_space
    max_steps = _NEVER if config.max_steps is None else config.max_steps
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
        env = envs[i]
        while queue:
            job = queue.pop()
            try:
                obs, _ = env.reset(seed=job.seed)
            except OracleFailure as exc:
                yield record(_Episode(job, np.empty(0), env.step), False, False, exc.reason)
                continue
            # the wrapper holding the true observation (an observation perturbation, outermost)
            observer = env if getattr(env, "true_obs", None) is not None else None
            ep = slots[i] = _Episode(job, obs, env.step, observer)
            layers[i].attach(ep)
            return
        slots[i] = None

    for i in range(len(envs)):
        yield from fill(i)
    space = envs[0].action_space  # copies of one cell's environment share it: checked per batch
    shared = all(_same_space(space, env.action_space) for env in envs[1:])
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

    def live(part: range) -> list[tuple[int, _Episode]]:
        return [(i, ep) for i in part if (ep := slots[i]) is not None]

    def observations(running: list[tuple[int, _Episode]]) -> np.ndarray:
        """The live rows' observations as float64 rows, converted once for the whole step."""
        if len(running) == 1:
            return np.asarray(running[0][1].obs, dtype=np.float64)[None]
        return np.array([ep.obs for _, ep in running], dtype=np.float64)

    def advance(
        running: list[tuple[int, _Episode]], results: np.ndarray | list[CallResult]
    ) -> Iterator[EpisodeRecord]:
        """Step the ``running`` rows with their calls' ``results``; yield the episodes ended."""
        raw, accepted, failed = _step_actions(results, len(running), size, accept)
        for row, (i, ep) in enumerate(running):
            if failed is not None and failed[row] is not None:
                yield record(ep, False, False, failed[row])
                yield from fill(i)
                continue
            t = ep.steps
            n = t + 1
            try:
                action = _UNCHECKED if accepted is None else accepted[row]
                if action is _UNCHECKED:
                    action = to_action(envs[i].action_space, raw[row], rule)
                obs, reward, terminated, truncated, info = ep.step(action)
                reward = float(reward)
                if n >= ep.horizon:
                    truncated = True  # TimeLimit's own rule, where the rollout steps past it
                if strict:
                    seen_keys.update(info)
                # spec.info_read, read here: the value when it is a finite float, else None
                cost = None
                if cost_key is not None and type(info) is dict:
                    cost = info.get(cost_key, cost_default)
                    if type(cost) is not float or cost - cost != 0.0:  # inf - inf is NaN
                        cost = None
                if cost is None:
                    # the spec judges the true observation: the one before an observation
                    # perturbation
                    true_obs = obs if ep.observer is None else ep.observer.true_obs
                    cost = spec.step_cost(
                        step_scope(true_obs, action, reward, info, terminated, truncated, t)
                    )
            except OracleFailure as exc:
                yield record(ep, False, False, exc.reason)
                yield from fill(i)
                continue
            except EvalError as exc:
                if strict:
                    raise SpecFailure("spec.cost", f"at step {n}: {exc.reason}") from None
                yield record(ep, False, False, f"spec: spec.cost: {exc.reason}")
                yield from fill(i)
                continue
            ep.steps = n
            ep.ret += reward
            ep.cost += cost
            ep.obs = obs
            if n >= max_steps and not terminated:
                truncated = True  # after the step's cost, which saw the environment's flag
            if terminated or truncated:
                true_obs = obs if ep.observer is None else ep.observer.true_obs
                ep.last = step_scope(true_obs, action, reward, info, terminated, truncated, t)
                yield record(ep, bool(terminated), bool(truncated), None)
                yield from fill(i)

    if post is None or len(envs) <= size:
        every = range(len(envs))
        running = live(every)
        while running:
            ended = False  # the live rows change only when an episode ends
            for done in advance(running, step_calls(observations(running), size)):
                ended = True
                yield done
            if ended:
                running = live(every)
        return
    # two halves of the copies (whole calls each), stepped in turn; ahead: one half's calls in
    # flight while the other half steps
    half = -(-len(envs) // size // 2) * size
    parts = (range(half), range(half, len(envs)))
    in_flight: deque[tuple[range, list[tuple[int, _Episode]], Reply]] = deque()

    def send(part: range) -> None:
        if running := live(part):
            in_flight.append((part, running, post(observations(running), size)))

    send(parts[0])
    if ahead:
        send(parts[1])
    try:
        while in_flight:
            part, running, reply = in_flight.popleft()
            yield from advance(running, reply())
            if ahead:
                send(part)
            else:  # the other half next, or this one again when the other has no episode left
                send(parts[part is parts[0]])
                if not in_flight:
                    send(part)
    finally:  # a run that stops early still reads what it sent: the next request gets its reply
        for _, _, reply in in_flight:
            reply()


def _same_space(space: gym.Space, other: gym.Space) -> bool:
    """``other == space``, decided without numpy's ``allclose`` for two boxes of one shape and
    dtype whose bounds are the same bytes and hold no NaN (``Box.__eq__`` is then true:
    callgrind, 288k instructions for two HalfCheetah boxes, once per copy and chunk)."""
    if (
        type(space) is spaces.Box
        and type(other) is spaces.Box
        and other.shape == space.shape
        and other.dtype == space.dtype
        and other.low.tobytes() == space.low.tobytes()
        and other.high.tobytes() == space.high.tobytes()
        and not (np.isnan(space.low).any() or np.isnan(space.high).any())
    ):
        return True
    return bool(other == space)


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
