"""The black-box run config (docs/architecture.md, "Black-box run config").

Exactly the documented keys plus these documented additions (docs/blackbox.md):

- top level: ``batch_size`` (rows per oracle call), ``lockstep`` (K: a worker steps K ×
  ``batch_size`` episodes together, one oracle call per ``batch_size`` rows; the calls of a step
  travel to a policy worker in one round trip; default 16 for a policy in a policy worker or a
  ``python:`` policy in process in a fixed-N run, else 1: ``safecert.blackbox.backends.lockstep``),
  ``workers`` (default: ``os.cpu_count()``), ``env_kwargs``, ``headers``, ``timeout_s``,
  ``retries``, ``batched``, ``range_episodes`` (rollouts of the reference policy used to estimate
  unbounded observation ranges when ``envelope.obs_ranges = "estimate"``), ``artifacts`` (files the policy loads that the policy string
  does not name, e.g. the ``ppo.zip`` a Python wrapper opens: hashed into the certificate);
- ``[spec] max_step_cost``: the largest cost of one step, so that the cost range of the Hoeffding
  UCB can be derived as ``[0, max_steps * max_step_cost]`` when ``[kpis] cost`` is not declared;
  ``[spec] action_out_of_space``: ``"fail"`` (default) or ``"clip"``, one rule for every cell;
  ``cost``/``goal`` are expressions (:mod:`safecert.blackbox.spec`);
- ``[kpis]``: ``return``, ``cost`` and ``steps`` may be declared (each ``{lower, upper}``);
- ``[envelope]``: ``obs_noise``/``act_noise`` (kind gaussian | uniform | linf), ``delay``,
  ``dynamics`` (``mass``/``friction``/``damping`` scale lists), ``random_dynamics``, ``layout``,
  and the ranges Δ: ``obs_ranges``, ``act_ranges``, ``reference_policy``;
- ``[adversary]``: the query budget of the L∞ adversary (``candidates`` per step).

Every model forbids unknown keys, so a misspelt key is one ConfigError line naming it.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from safecert.config import parse_model, read_toml
from safecert.errors import ConfigError

#: unknown keys, coercions (``episodes = true``, ``budget = "5"``) and non-finite numbers are errors
_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)
#: beyond these a run is absurd on any machine (limits are stated in the error)
MAX_EPISODES = 10_000_000
MAX_TIMEOUT_S = 86_400.0
#: grid cells a run may hold: every cell is checked and built before the first episode, and each is
#: judged at δ/M, so a grid beyond this is a typo (a generated level list) rather than a plan
MAX_CELLS = 10_000
Level = Annotated[float, Field(ge=0.0, le=1.0)]


class Spec(BaseModel):
    """What a failure is and what must be certified (``cost`` and ``goal`` are expressions of
    :mod:`safecert.blackbox.spec`, validated here so a malformed one is one line at load)."""

    model_config = _STRICT
    budget: float = Field(100.0, ge=0.0)
    p_star: float = Field(0.05, gt=0.0, lt=1.0)
    confidence: float = Field(0.90, gt=0.0, lt=1.0)
    goal: str = "no_termination"
    cost: str = "info:cost"
    max_step_cost: float = Field(1.0, gt=0.0)
    action_out_of_space: Literal["fail", "clip"] = "fail"

    @field_validator("goal")
    @classmethod
    def _goal(cls, value: str) -> str:
        from safecert.blackbox.spec import EPISODE_NAMES, RETURN_GOAL, goal_expression

        match = RETURN_GOAL.fullmatch(value)
        if match:
            try:
                threshold = float(match.group(1))
            except ValueError:
                threshold = math.nan
            if not math.isfinite(threshold):
                raise ConfigError(
                    f"the threshold {match.group(1)!r} in {value!r} is not a finite number",
                    field="spec.goal",
                    fix='write e.g. goal = "return>=200"',
                )
        _check_expression(goal_expression, value, "spec.goal", EPISODE_NAMES)
        return value

    @field_validator("cost")
    @classmethod
    def _cost(cls, value: str) -> str:
        from safecert.blackbox.spec import STEP_NAMES, cost_expression

        _check_expression(cost_expression, value, "spec.cost", STEP_NAMES)
        return value

    @property
    def return_threshold(self) -> float | None:
        from safecert.blackbox.spec import RETURN_GOAL

        match = RETURN_GOAL.fullmatch(self.goal)
        return float(match.group(1)) if match else None


def _check_expression(expand: Any, value: str, field: str, names: tuple[str, ...]) -> None:
    """Parse ``value`` (after shorthand expansion). Its ConfigError, which names ``field`` and
    quotes the expression once, passes through pydantic unchanged (a ValueError would be
    reported with the expression repeated as the received value)."""
    from safecert.expressions import parse

    parse(expand(value), field, names=names)


class KpiRange(BaseModel):
    """A declared range [lower, upper] of an episode statistic (needed by Hoeffding)."""

    model_config = _STRICT
    lower: float
    upper: float

    @model_validator(mode="after")
    def _ordered(self) -> KpiRange:
        if not (
            math.isfinite(self.lower) and math.isfinite(self.upper) and self.lower < self.upper
        ):
            raise ValueError("lower must be finite and smaller than upper")
        return self


class Kpis(BaseModel):
    model_config = _STRICT
    return_: KpiRange | None = Field(None, alias="return")
    cost: KpiRange | None = None
    steps: KpiRange | None = None

    @model_validator(mode="after")
    def _finite_spans(self) -> Kpis:
        for name, kpi in (("return", self.return_), ("cost", self.cost), ("steps", self.steps)):
            if kpi is not None and not math.isfinite(kpi.upper - kpi.lower):
                raise ConfigError(
                    f"the span upper - lower of [{kpi.lower:g}, {kpi.upper:g}] overflows to inf, "
                    "so its Hoeffding bound would have no finite width",
                    field=f"kpis.{name}",
                    fix="declare the range the statistic can really take (e.g. the return of "
                    "max_steps steps at the largest reward per step)",
                )
        return self


class NoiseAxis(BaseModel):
    """Observation or action perturbation: kind and levels (fraction of each dimension's range)."""

    model_config = _STRICT
    kind: Literal["gaussian", "uniform", "linf"] = "gaussian"
    levels: list[Level] = Field(min_length=1)


class DelayAxis(BaseModel):
    model_config = _STRICT
    levels: list[Annotated[int, Field(ge=0, le=1000)]] = Field(min_length=1)


class LevelAxis(BaseModel):
    model_config = _STRICT
    levels: list[Level] = Field(min_length=1)


Scale = Annotated[float, Field(gt=0.0, le=100.0)]


class DynamicsAxis(BaseModel):
    """Deterministic physical shifts: scale factors on mass, friction, damping."""

    model_config = _STRICT
    mass: list[Scale] | None = Field(None, min_length=1)
    friction: list[Scale] | None = Field(None, min_length=1)
    damping: list[Scale] | None = Field(None, min_length=1)


class LayoutAxis(BaseModel):
    """Layout randomisation for tasks that have layouts: levels are off (false) / on (true)."""

    model_config = _STRICT
    levels: list[bool] = Field(min_length=1)


Bounds = Annotated[list[float], Field(min_length=2, max_length=2)]


def _check_bounds(value: list[list[float]] | None, field: str) -> None:
    for i, (lo, hi) in enumerate(value or ()):
        if not lo < hi:
            raise ValueError(f"[{lo}, {hi}] at {field}[{i}]: lo must be smaller than hi")
        if not math.isfinite(hi - lo):
            raise ConfigError(
                f"the span hi - lo of [{lo:g}, {hi:g}] overflows to inf, so a noise level (a "
                "fraction of the span) would be infinite",
                field=f"envelope.{field}[{i}]",
                fix="declare the range the dimension really takes",
            )


def grid_size(envelope: Envelope) -> int:
    """The number of grid cells: the product of the axes' distinct level counts (as
    :func:`safecert.blackbox.grid.axes` lists them), computed without building the grid."""
    counts = [
        len(set(axis.levels))
        for axis in (
            envelope.obs_noise,
            envelope.act_noise,
            envelope.delay,
            envelope.random_dynamics,
            envelope.layout,
        )
        if axis is not None
    ]
    if envelope.dynamics is not None:
        counts += [
            len(set(levels))
            for levels in (
                envelope.dynamics.mass,
                envelope.dynamics.friction,
                envelope.dynamics.damping,
            )
            if levels is not None
        ]
    return math.prod(counts)


class Envelope(BaseModel):
    """The grid's axes, and the ranges Δ its noise levels are fractions of.

    ``obs_ranges``: ``[[lo, hi], …]`` (one pair per observation dimension, flattened) fixes Δ_s
    for every dimension; ``"estimate"`` estimates unbounded dimensions from ``range_episodes``
    nominal rollouts of ``reference_policy`` (never the policy under test), flagged in the
    certificate; unset, the observation space's own bounds are used and an unbounded dimension
    under observation noise is an error. ``act_ranges`` does the same for the action space
    (declared only).
    """

    model_config = _STRICT
    obs_noise: NoiseAxis | None = None
    act_noise: NoiseAxis | None = None
    delay: DelayAxis | None = None
    dynamics: DynamicsAxis | None = None
    random_dynamics: LevelAxis | None = None
    layout: LayoutAxis | None = None
    obs_ranges: Literal["estimate"] | list[Bounds] | None = Field(None, min_length=1)
    act_ranges: list[Bounds] | None = Field(None, min_length=1)
    reference_policy: str | None = Field(None, min_length=1)

    @field_validator("obs_ranges", "act_ranges", mode="before")
    @classmethod
    def _shape(cls, value: Any) -> Any:
        if isinstance(value, str) and value != "estimate":
            raise ValueError('must be [[lo, hi], ...] or "estimate"')
        if isinstance(value, list) and not all(
            isinstance(pair, list) and len(pair) == 2 for pair in value
        ):
            raise ValueError("must be a list of [lo, hi] pairs, one per dimension")
        return value

    @model_validator(mode="after")
    def _ranges(self) -> Envelope:
        if isinstance(self.obs_ranges, list):
            _check_bounds(self.obs_ranges, "obs_ranges")
        _check_bounds(self.act_ranges, "act_ranges")
        if self.obs_ranges == "estimate" and self.reference_policy is None:
            raise ValueError(
                'obs_ranges = "estimate" needs reference_policy (the fixed policy whose '
                "rollouts estimate the ranges, never the one under test), e.g. "
                'reference_policy = "random"'
            )
        if self.reference_policy is not None and self.obs_ranges != "estimate":
            raise ValueError('reference_policy is only used with obs_ranges = "estimate"')
        cells = grid_size(self)
        if cells > MAX_CELLS:
            raise ConfigError(
                f"the grid has {cells:,} cells (the product of the axes' level counts), more than "
                f"the {MAX_CELLS:,} a run may hold",
                field="envelope",
                fix="list fewer levels per axis (each cell is judged at (1 - confidence) / M, so "
                "a larger grid also needs more episodes per cell), or split the envelope into "
                "several runs",
            )
        return self


class Adversary(BaseModel):
    """Query budget of the black-box L∞ adversary: corner candidates evaluated per step."""

    model_config = _STRICT
    candidates: int = Field(8, ge=1, le=1024)


class RunConfig(BaseModel):
    """A validated black-box run config."""

    model_config = _STRICT
    policy: str = Field(min_length=1)
    env: str = Field(min_length=1)
    episodes: int = Field(ge=1, le=MAX_EPISODES)
    seed: int = Field(0, ge=0)
    max_steps: int | None = Field(None, ge=1, le=100_000_000)
    batch_size: int = Field(1, ge=1, le=4096)
    lockstep: int | None = Field(None, ge=1, le=1024)
    workers: int | None = Field(None, ge=1)
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = Field(10.0, gt=0.0, le=MAX_TIMEOUT_S)
    retries: int = Field(3, ge=0, le=100)
    batched: bool = True
    trust: Literal["isolated", "in-process"] = "isolated"
    range_episodes: int = Field(10, ge=1, le=100_000)
    # a mutable default is copied for each instance by pydantic; ``default_factory=list`` would
    # cost inspect.signature(list) at class creation, a tokenizer run of ~4 ms in a run's start-up
    artifacts: list[str] = []
    spec: Spec = Field(default_factory=lambda: Spec.model_validate({}))
    kpis: Kpis = Field(default_factory=lambda: Kpis.model_validate({}))
    envelope: Envelope = Field(default_factory=lambda: Envelope.model_validate({}))
    adversary: Adversary = Field(default_factory=lambda: Adversary.model_validate({}))
    sequential: dict[str, Any] | None = None  # interpreted by safecert.blackbox.sequential

    @field_validator("env_kwargs")
    @classmethod
    def _headless(cls, value: dict[str, Any]) -> dict[str, Any]:
        if "render_mode" in value:
            raise ConfigError(
                f"render_mode = {value['render_mode']!r} is not accepted: certification never "
                "renders (episodes run headless in worker processes, and a window or a frame per "
                "step would only slow them down or need a display and pygame)",
                field="env_kwargs.render_mode",
                fix="remove render_mode from env_kwargs",
            )
        return value


def certified_parameters(config: RunConfig) -> dict[str, Any]:
    """The config as it goes into ``certificate.parameters``.

    Execution-only settings (``workers``, ``batch_size``, ``lockstep``, ``headers`` which may
    hold secrets, ``timeout_s``, ``retries``) are left out: they cannot change the outcome of an episode, so
    certificates stay bit-identical across them.
    """
    data = config.model_dump(mode="json", by_alias=True, exclude_none=True)
    for key in ("workers", "batch_size", "lockstep", "headers", "timeout_s", "retries"):
        data.pop(key, None)
    return data


def load_run_config(path: Path) -> tuple[RunConfig, Path, str]:
    """Read ``path`` → (config, the folder relative paths resolve from, config SHA-256)."""
    path = Path(path)
    data = read_toml(path)
    config = parse_model(RunConfig, data)
    return config, path.resolve().parent, hashlib.sha256(path.read_bytes()).hexdigest()


def require(condition: bool, message: str, field: str, fix: str | None = None) -> None:
    """Raise a ConfigError unless ``condition``."""
    if not condition:
        raise ConfigError(message, field=field, fix=fix)
