"""The TOML configuration of ``safecert bnn verify`` (pydantic, unknown keys are errors).

Example (``examples/bnn/lds.toml``)::

    policy = "lds.npz"          # W0, b0, W1, b1, … (Keras layout); relative to this file
    system = "lds"              # lds | pend | car (the dynamics, X0, X_u, verification box)
    epsilon = "1.5sigma"        # absolute ("0.15") or in units of σ; or use [search]
    seed = 0
    solver = "highs"            # highs | scip

    [bayesian]
    sigma = 0.1                 # one σ for every Bayesian layer, or a list with one per layer
    first_layer = 1             # layers first_layer, first_layer+1, … are Bayesian
    biases = false

    [search]                    # used with --search (or enabled = true)
    ladder = ["0.5sigma", "1sigma", "1.5sigma", "2sigma"]
    bisection_steps = 0

    [limits]
    per_epsilon_s = 300         # one CEGIS run (Alg. 1) → UNKNOWN when exceeded
    total_s = 1800              # the whole ε search
    solver_s = 120              # one MILP
    max_iterations = 200        # CEGIS iterations per ε
    clock = "wall"              # or "cpu": limits in this process's CPU seconds (shared machines)

``--benchmark NAME`` builds the same model from the published setup (:func:`benchmark_config`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from safecert.bnn.networks import BENCHMARK_POLICIES, ReluNetwork, load_policy
from safecert.bnn.spec import BayesianSpec, Epsilon, parse_epsilon
from safecert.config import parse_model, read_toml
from safecert.errors import ConfigError


@dataclass(frozen=True)
class LearnerSettings:
    """Hyper-parameters of :class:`~safecert.bnn.learner.Learner` (epochs over D_spec, Adam
    learning rate, weight λ and margin of the counterexample loss, torch threads)."""

    hidden: tuple[int, ...] = (12,)
    epochs: int = 60
    warm_epochs: int = 20
    batch_size: int = 256
    learning_rate: float = 1e-2
    lam: float = 10.0
    margin: float = 0.0
    threads: int = 1

    def __post_init__(self) -> None:
        for name in ("epochs", "warm_epochs", "batch_size", "threads"):
            if getattr(self, name) < 1:
                raise ConfigError(f"must be >= 1 (got {getattr(self, name)})", field=name)
        if self.learning_rate <= 0 or self.lam < 0 or self.margin < 0:
            raise ConfigError(
                "learning_rate must be > 0, lam and margin >= 0",
                field="learner",
                fix="use e.g. learning_rate = 5e-3, lam = 1.0, margin = 0.0",
            )


DEFAULT_LADDER = ("0.5sigma", "1sigma", "1.5sigma", "2sigma", "2.5sigma", "3sigma")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _epsilon(value: str | float) -> Epsilon:
    """``parse_epsilon`` as a pydantic validation error (so the message names the dotted key)."""
    try:
        return parse_epsilon(value)
    except ConfigError as exc:
        detail = str(exc).removeprefix("epsilon: ")
        raise ValueError(detail) from exc


class BayesianConfig(_Model):
    sigma: float | list[float] = Field(
        default=0.1, description="σ per Bayesian layer (one or a list)"
    )
    first_layer: int = Field(default=1, ge=0, description="index of the first Bayesian layer")
    bayesian_layers: list[bool] | None = Field(
        default=None, description="explicit flags; overrides first_layer"
    )
    biases: bool = False


class SearchConfig(_Model):
    enabled: bool = False
    ladder: list[str | float] = Field(
        default_factory=lambda: list[str | float](DEFAULT_LADDER), min_length=1
    )
    bisection_steps: int = Field(default=0, ge=0)

    @field_validator("ladder")
    @classmethod
    def _ladder(cls, v: list[str | float]) -> list[str | float]:
        eps = [_epsilon(e) for e in v]
        if len({e.in_sigma for e in eps}) > 1:
            raise ValueError("mix of absolute and σ-relative values")
        vals = [e.value for e in eps]
        if vals != sorted(vals) or len(set(vals)) != len(vals):
            raise ValueError("must be strictly increasing")
        return v


class LimitsConfig(_Model):
    per_epsilon_s: float = Field(default=300.0, gt=0)
    total_s: float = Field(default=1800.0, gt=0)
    solver_s: float = Field(default=120.0, gt=0)
    max_iterations: int = Field(default=200, ge=1)
    clock: Literal["wall", "cpu"] = Field(
        default="wall", description="cpu: budgets in process CPU time"
    )


class InvariantConfig(_Model):
    hidden: list[int] = Field(default_factory=lambda: [12], min_length=1)


class LearnerConfig(_Model):
    epochs: int = Field(default=LearnerSettings.epochs, ge=1)
    warm_epochs: int = Field(default=LearnerSettings.warm_epochs, ge=1)
    batch_size: int = Field(default=LearnerSettings.batch_size, ge=1)
    learning_rate: float = Field(default=LearnerSettings.learning_rate, gt=0)
    lam: float = Field(default=LearnerSettings.lam, ge=0)
    margin: float = Field(default=0.05, ge=0)
    threads: int = Field(default=1, ge=1)
    retrain: bool = Field(default=True, description="false = the 'no re-training' ablation")


class DataConfig(_Model):
    initial_samples: int = Field(default=500, ge=1)
    unsafe_samples: int = Field(default=500, ge=1)
    bootstrap: bool = True
    bootstrap_states: int = Field(default=2000, ge=0)
    bootstrap_rollouts: int = Field(default=4, ge=1)
    bootstrap_horizon: int = Field(default=60, ge=1)
    falsifier_samples: int = Field(
        default=4000, ge=0, description="sampled closure checks before each MILP"
    )


class BnnConfig(_Model):
    policy: str
    system: Literal["lds", "pend", "car"]
    epsilon: str | float = "1sigma"
    seed: int = 0
    solver: Literal["highs", "scip"] = "highs"
    bayesian: BayesianConfig = Field(default_factory=BayesianConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    invariant: InvariantConfig = Field(default_factory=InvariantConfig)
    learner: LearnerConfig = Field(default_factory=LearnerConfig)
    data: DataConfig = Field(default_factory=DataConfig)

    @field_validator("epsilon")
    @classmethod
    def _eps(cls, v: str | float) -> str | float:
        _epsilon(v)
        return v

    def epsilon_value(self) -> Epsilon:
        return parse_epsilon(self.epsilon)

    def learner_settings(self) -> LearnerSettings:
        lc = self.learner
        return LearnerSettings(
            hidden=tuple(self.invariant.hidden),
            epochs=lc.epochs,
            warm_epochs=lc.warm_epochs,
            batch_size=lc.batch_size,
            learning_rate=lc.learning_rate,
            lam=lc.lam,
            margin=lc.margin,
            threads=lc.threads,
        )


def load_policy_network(cfg: BnnConfig, base: Path | None) -> tuple[ReluNetwork, Path | None]:
    """The mean network named by ``cfg.policy``: a path to an ``.npz`` (relative to the config's
    folder) or ``benchmark:NAME`` for a packaged policy. Returns the network and its file."""
    if cfg.policy.startswith("benchmark:"):
        return load_policy(cfg.policy.removeprefix("benchmark:")), None
    path = Path(cfg.policy)
    if not path.is_absolute() and base is not None:
        path = base / path
    if not path.is_file():
        raise ConfigError(
            f"{path} does not exist", field="policy", fix="give an .npz with W0, b0, W1, b1, …"
        )
    return ReluNetwork.from_npz(path), path


def bayesian_spec(cfg: BnnConfig, net: ReluNetwork) -> BayesianSpec:
    """The :class:`BayesianSpec` of ``cfg.bayesian`` for ``net`` (one σ per layer)."""
    b = cfg.bayesian
    n = len(net.layers)
    flags = (
        tuple(b.bayesian_layers)
        if b.bayesian_layers is not None
        else tuple(k >= b.first_layer for k in range(n))
    )
    if len(flags) != n:
        raise ConfigError(
            f"{len(flags)} flags for a {n}-layer policy",
            field="bayesian.bayesian_layers",
            fix=f"give {n} true/false values",
        )
    if isinstance(b.sigma, list):
        if len(b.sigma) != n:
            raise ConfigError(
                f"{len(b.sigma)} values for a {n}-layer policy",
                field="bayesian.sigma",
                fix=f"give one σ or {n} values",
            )
        sigma = tuple(float(s) if f else 0.0 for s, f in zip(b.sigma, flags, strict=True))
    else:
        sigma = tuple(float(b.sigma) if f else 0.0 for f in flags)
    if not any(flags):
        raise ConfigError(
            "no layer is Bayesian", field="bayesian", fix="set first_layer or bayesian_layers"
        )
    return BayesianSpec(sigma, flags, b.biases)


def load_config(path: Path) -> BnnConfig:
    return parse_model(BnnConfig, read_toml(path))


def benchmark_config(name: str, **overrides: object) -> BnnConfig:
    """The published setup of one of the six policies (README of the data; Appendix C):
    σ = 0.1 from the second layer on, or 0.05 after the fixed ``[I, −I]`` layer of ``*_all``;
    kernels only; invariant width 12 (LDS, pendulum) or 32 (collision avoidance)."""
    if name not in BENCHMARK_POLICIES:
        raise ConfigError(
            f"unknown benchmark {name!r}",
            field="benchmark",
            fix=f"use one of {', '.join(BENCHMARK_POLICIES)}",
        )
    system = name.removesuffix("_all")
    data: dict[str, object] = {
        "policy": f"benchmark:{name}",
        "system": system,
        "bayesian": {"sigma": 0.05 if name.endswith("_all") else 0.1, "first_layer": 1},
        "invariant": {"hidden": [32] if system == "car" else [12]},
    }
    data.update(overrides)
    return parse_model(BnnConfig, data)
