"""The black-box run config (ARCHITECTURE.md, "Black-box run config").

Exactly the documented keys plus these documented additions (docs/blackbox.md):

- top level: ``batch_size`` (env copies stepped in lockstep per worker, one oracle call per step),
  ``workers`` (default: ``os.cpu_count()``), ``env_kwargs``, ``headers``, ``timeout_s``,
  ``retries``, ``batched``, ``range_episodes`` (nominal rollouts used to estimate the range of
  unbounded observation dimensions), ``artifacts`` (files the policy loads that the policy string
  does not name, e.g. the ``ppo.zip`` a Python wrapper opens: hashed into the certificate);
- ``[spec] max_step_cost``: the largest cost of one step, so that the cost range of the Hoeffding
  UCB can be derived as ``[0, max_steps * max_step_cost]`` when ``[kpis] cost`` is not declared;
- ``[kpis]``: ``return``, ``cost`` and ``steps`` may be declared (each ``{lower, upper}``);
- ``[envelope]``: ``obs_noise``/``act_noise`` (kind gaussian | uniform | linf), ``delay``,
  ``dynamics`` (``mass``/``friction``/``damping`` scale lists), ``random_dynamics``, ``layout``;
- ``[adversary]``: the query budget of the L∞ adversary (``candidates`` per step).

Every model forbids unknown keys, so a misspelt key is one ConfigError line naming it.
"""

from __future__ import annotations

import hashlib
import math
import re
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
Level = Annotated[float, Field(ge=0.0, le=1.0)]


class Spec(BaseModel):
    """What a failure is and what must be certified."""

    model_config = _STRICT
    budget: float = Field(100.0, ge=0.0)
    p_star: float = Field(0.05, gt=0.0, lt=1.0)
    confidence: float = Field(0.90, gt=0.0, lt=1.0)
    goal: str = "no_termination"
    cost: str = "info:cost"
    max_step_cost: float = Field(1.0, gt=0.0)

    @field_validator("goal")
    @classmethod
    def _goal(cls, value: str) -> str:
        match = _RETURN_GOAL.fullmatch(value)
        if match:
            try:
                threshold = float(match.group(1))
            except ValueError:
                raise ValueError(f"{match.group(1)!r} in 'return>=X' is not a number") from None
            if not math.isfinite(threshold):
                raise ValueError("the return threshold must be finite")
            return value
        if value == "no_termination" or value.startswith("info:"):
            return value
        raise ValueError("goal must be 'no_termination', 'info:KEY' or 'return>=X'")

    @field_validator("cost")
    @classmethod
    def _cost(cls, value: str) -> str:
        if value.startswith("info:") and len(value) > 5:
            return value
        raise ValueError("cost must be 'info:KEY'")

    @property
    def return_threshold(self) -> float | None:
        match = _RETURN_GOAL.fullmatch(self.goal)
        return float(match.group(1)) if match else None


_RETURN_GOAL = re.compile(r"return\s*>=\s*([-+0-9.eE]+)")


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


class Envelope(BaseModel):
    model_config = _STRICT
    obs_noise: NoiseAxis | None = None
    act_noise: NoiseAxis | None = None
    delay: DelayAxis | None = None
    dynamics: DynamicsAxis | None = None
    random_dynamics: LevelAxis | None = None
    layout: LayoutAxis | None = None


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
    workers: int | None = Field(None, ge=1)
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = Field(10.0, gt=0.0, le=MAX_TIMEOUT_S)
    retries: int = Field(3, ge=0, le=100)
    batched: bool = True
    range_episodes: int = Field(10, ge=1, le=100_000)
    artifacts: list[str] = Field(default_factory=list)
    spec: Spec = Field(default_factory=Spec)
    kpis: Kpis = Field(default_factory=Kpis)
    envelope: Envelope = Field(default_factory=Envelope)
    adversary: Adversary = Field(default_factory=Adversary)
    sequential: dict[str, Any] | None = None  # interpreted by safecert.blackbox.sequential


def certified_parameters(config: RunConfig) -> dict[str, Any]:
    """The config as it goes into ``certificate.parameters``.

    Execution-only settings (``workers``, ``batch_size``, ``headers`` which may hold secrets,
    ``timeout_s``, ``retries``) are left out: they cannot change the outcome of an episode, so
    certificates stay bit-identical across them.
    """
    data = config.model_dump(mode="json", by_alias=True, exclude_none=True)
    for key in ("workers", "batch_size", "headers", "timeout_s", "retries"):
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
