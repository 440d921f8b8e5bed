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

    [limits]                    # budgets in work: same config, same certificate, any machine
    max_iterations = 200        # CEGIS iterations (learner rounds) per ε → UNKNOWN when spent
    solver_nodes = 100000       # branch-and-bound nodes per MILP → UNKNOWN ("node limit")
    # wall-clock guards only (a run they cut is UNKNOWN and marked machine_dependent)
    per_epsilon_s = 1800        # one CEGIS run (Alg. 1)
    total_s = 7200              # the whole ε search
    solver_s = 600              # one MILP

    [verifier]
    closure_splits = 0          # closure asked on 2**k pieces of the step domain (--workers)

``--benchmark NAME`` builds the same model from the published setup (:func:`benchmark_config`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from safecert.bnn.networks import (
    POLICY_SUFFIXES,
    ReluNetwork,
    load_policy,
    read_policy_file,
)
from safecert.bnn.spec import BayesianSpec, Epsilon, parse_epsilon
from safecert.errors import ConfigError

if TYPE_CHECKING:
    from safecert.bnn.dynamics import System


@dataclass(frozen=True)
class LearnerSettings:
    """Hyper-parameters of :class:`~safecert.bnn.learner.Learner` (epochs over D_spec, Adam
    learning rate, weight λ and margin of the counterexample loss, torch threads). These are the
    only defaults: ``[learner]`` in a config (:class:`LearnerConfig`) takes each of them."""

    hidden: tuple[int, ...] = (12,)
    epochs: int = 60
    warm_epochs: int = 20
    batch_size: int = 256
    learning_rate: float = 1e-2
    lam: float = 10.0
    margin: float = 0.05
    threads: int = 1

    def __post_init__(self) -> None:
        for name in ("epochs", "warm_epochs", "batch_size", "threads"):
            if getattr(self, name) < 1:
                raise ConfigError(f"must be >= 1 (got {getattr(self, name)})", field=name)
        if self.learning_rate <= 0 or self.lam < 0 or self.margin < 0:
            raise ConfigError(
                "learning_rate must be > 0, lam and margin >= 0",
                field="learner",
                fix="use e.g. learning_rate = 5e-3, lam = 1.0, margin = 0.05",
            )


#: stated limits on sizes and times (absurd values are refused at the door, not allocated)
MAX_SAMPLES = 1_000_000
MAX_SECONDS = 1e7
MAX_NODES = 10**9

DEFAULT_LADDER = ("0.5sigma", "1sigma", "1.5sigma", "2sigma", "2.5sigma", "3sigma")


class _Model(BaseModel):
    """Strict tables: unknown keys, inf and nan are errors; every size has a stated limit."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


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
    first_layer: int = Field(
        default=1, ge=0, le=1000, description="index of the first Bayesian layer"
    )
    bayesian_layers: list[bool] | None = Field(
        default=None, description="explicit flags; overrides first_layer"
    )
    biases: bool = False
    sigma_file: str | None = Field(
        default=None,
        description="one σ per weight: a file shaped as the policy (.npz W0, b0, …; .onnx; "
        ".pt state_dict), relative to the config; replaces sigma in the Bayesian layers",
    )


class SearchConfig(_Model):
    enabled: bool = False
    ladder: list[str | float] = Field(
        default_factory=lambda: list[str | float](DEFAULT_LADDER), min_length=1, max_length=64
    )
    bisection_steps: int = Field(default=0, ge=0, le=60)

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


#: ``[limits]`` keys that no longer exist, and what to do instead (one line, exit 2)
REMOVED_LIMITS = {
    "clock": (
        "was removed: budgets are counted in work (max_iterations, solver_nodes), and "
        "per_epsilon_s, total_s and solver_s are wall-clock guards only",
        "delete the key; to bound the work set limits.max_iterations or limits.solver_nodes",
    ),
}


class LimitsConfig(_Model):
    """``[limits]``: the work budgets that decide a result (the same on every machine) and the
    wall-clock guards that only stop a run that would not end (a run they cut is UNKNOWN and
    ``machine_dependent``)."""

    max_iterations: int = Field(
        default=200, ge=1, le=1_000_000, description="CEGIS iterations (learner rounds) per ε"
    )
    solver_nodes: int = Field(
        default=100_000,
        ge=1,
        le=MAX_NODES,
        description="branch-and-bound nodes per MILP (HiGHS mip_max_nodes, SCIP limits/totalnodes)",
    )
    per_epsilon_s: float = Field(
        default=1800.0, gt=0, le=MAX_SECONDS, description="wall-clock guard of one ε attempt"
    )
    total_s: float = Field(
        default=7200.0, gt=0, le=MAX_SECONDS, description="wall-clock guard of the ε search"
    )
    solver_s: float = Field(
        default=600.0, gt=0, le=MAX_SECONDS, description="wall-clock guard of one MILP"
    )

    @model_validator(mode="before")
    @classmethod
    def _removed(cls, data: object) -> object:
        if isinstance(data, dict):
            for key, (what, fix) in REMOVED_LIMITS.items():
                if key in data:
                    raise ConfigError(what, field=f"limits.{key}", fix=fix)
        return data


class VerifierConfig(_Model):
    """``[verifier]``: how the closure question is asked (part of the outcome, so recorded)."""

    closure_splits: int = Field(
        default=0,
        ge=0,
        le=6,
        description="ask closure on 2**closure_splits pieces of the step domain (halved along "
        "dimension k mod d at cut k), each its own MILP with its own node budget; the pieces run "
        "in parallel on --workers processes",
    )


class InvariantConfig(_Model):
    hidden: list[Annotated[int, Field(ge=1, le=4096)]] = Field(
        default_factory=lambda: [12], min_length=1, max_length=16
    )


class LearnerConfig(_Model):
    epochs: int = Field(default=LearnerSettings.epochs, ge=1, le=100_000)
    warm_epochs: int = Field(default=LearnerSettings.warm_epochs, ge=1, le=100_000)
    batch_size: int = Field(default=LearnerSettings.batch_size, ge=1, le=MAX_SAMPLES)
    learning_rate: float = Field(default=LearnerSettings.learning_rate, gt=0, le=10.0)
    lam: float = Field(default=LearnerSettings.lam, ge=0, le=1e6)
    margin: float = Field(default=LearnerSettings.margin, ge=0, le=1e3)
    threads: int = Field(default=LearnerSettings.threads, ge=1, le=256)
    retrain: bool = Field(default=True, description="false = the 'no re-training' ablation")


class DataConfig(_Model):
    initial_samples: int = Field(default=500, ge=1, le=MAX_SAMPLES)
    unsafe_samples: int = Field(default=500, ge=1, le=MAX_SAMPLES)
    bootstrap: bool = True
    bootstrap_states: int = Field(default=2000, ge=0, le=MAX_SAMPLES)
    bootstrap_rollouts: int = Field(default=4, ge=1, le=1000)
    bootstrap_horizon: int = Field(default=60, ge=1, le=100_000)
    falsifier_samples: int = Field(
        default=4000, ge=0, le=MAX_SAMPLES, description="sampled closure checks before each MILP"
    )
    witness_rollouts: int = Field(
        default=40_000,
        ge=0,
        le=100 * MAX_SAMPLES,
        description="rollouts spent per ε searching for an unsafe trajectory (0: no search)",
    )
    witness_horizon: int = Field(default=12, ge=1, le=1000)
    witness_max_horizon: int = Field(
        default=48,
        ge=1,
        le=10_000,
        description="adaptive horizon: when no witness of witness_horizon steps is found, "
        "rollouts of 2x, 4x, ... that many steps up to this (equal to witness_horizon: off)",
    )

    @model_validator(mode="after")
    def _horizons(self) -> DataConfig:
        if self.witness_max_horizon < self.witness_horizon:
            raise ValueError(
                f"witness_max_horizon ({self.witness_max_horizon}) is below witness_horizon "
                f"({self.witness_horizon})"
            )
        return self


Interval = list[float | str]  # [lo, hi]: numbers or constant expressions such as "-pi/6"


class DynamicsConfig(_Model):
    """``[dynamics]``: names and one piecewise-linear expression per next-state variable."""

    state: list[str] = Field(min_length=1, max_length=64, description="state variable names")
    action: list[str] = Field(
        min_length=1, max_length=64, description="names of the action values the dynamics read"
    )
    choices: list[float] | list[list[float]] | None = Field(
        default=None,
        description="discrete actions: row k is taken when policy output k is the largest",
    )
    integer: bool = Field(default=False, description="states are integers")
    define: dict[str, str] = Field(
        default_factory=dict, description="named sub-expressions, evaluated in order"
    )
    next: dict[str, str] = Field(description="one expression per state variable")


class SetConfig(_Model):
    """One set: exactly one of ``box``, ``outside`` (closed complement of a box), ``polytope``
    (affine inequalities such as ``"p - a_x <= 1"``), ``union`` (a list of sets)."""

    box: dict[str, Interval] | None = None
    outside: dict[str, Interval] | None = None
    polytope: list[str] | None = Field(default=None, min_length=1, max_length=256)
    union: list[SetConfig] | None = Field(default=None, min_length=1, max_length=256)

    @model_validator(mode="after")
    def _one(self) -> SetConfig:
        given = [k for k in ("box", "outside", "polytope", "union") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                f"give exactly one of box, outside, polytope, union (got {given or 'none'})"
            )
        return self


class SetsConfig(_Model):
    """``[sets]``: the verification box (``domain``), optional ``step_domain`` (states of the
    domain outside it are terminal), ``initial`` (X0) and ``unsafe`` (X_u)."""

    domain: dict[str, Interval]
    step_domain: dict[str, Interval] | None = None
    initial: SetConfig
    unsafe: SetConfig


class BnnConfig(_Model):
    policy: str
    system: str = Field(min_length=1, max_length=200, description="the system's name (reports)")
    dynamics: DynamicsConfig
    sets: SetsConfig
    epsilon: str | float = "1sigma"
    seed: int = Field(default=0, ge=0, le=2**63 - 1)
    solver: Literal["highs", "scip"] = "highs"
    bayesian: BayesianConfig = Field(default_factory=BayesianConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
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
    """The mean network named by ``cfg.policy``: a path (relative to the config's folder) to an
    ``.npz``, ``.onnx`` or torch ``state_dict`` (:func:`~safecert.bnn.networks.read_policy_file`),
    or ``benchmark:NAME`` for a packaged policy. Returns the network and its file."""
    if cfg.policy.startswith("benchmark:"):
        return load_policy(cfg.policy.removeprefix("benchmark:")), None
    path = _input_file(cfg.policy, base, "policy", "give a policy file")
    return read_policy_file(path), path


def _input_file(name: str, base: Path | None, field: str, fix: str) -> Path:
    """``name`` resolved against the config's folder; ConfigError on ``field`` when absent."""
    path = Path(name)
    if not path.is_absolute() and base is not None:
        path = base / path
    if not path.is_file():
        raise ConfigError(
            f"{path} does not exist", field=field, fix=f"{fix} ({', '.join(POLICY_SUFFIXES)})"
        )
    return path


def load_sigma_network(cfg: BnnConfig, base: Path | None) -> tuple[ReluNetwork, Path] | None:
    """The per-weight σ network named by ``bayesian.sigma_file`` (relative to the config's
    folder) and its path, or None when σ is given per layer."""
    if cfg.bayesian.sigma_file is None:
        return None
    path = _input_file(
        cfg.bayesian.sigma_file, base, "bayesian.sigma_file", "give a σ file shaped as the policy"
    )
    try:
        return read_policy_file(path), path
    except ConfigError as exc:
        raise ConfigError(str(exc), field="bayesian.sigma_file") from None


def check_policy_fits(net: ReluNetwork, system: System, where: str = "policy") -> None:
    """The policy reads the state and writes what the dynamics read (one line naming both sizes)."""
    need_out = system.n_actions
    if (net.in_dim, net.out_dim) != (system.state_dim, need_out):
        d = system.dynamics
        outs = f"{len(d.choices)} choice scores" if d.choices is not None else ", ".join(d.action)
        raise ConfigError(
            f"the policy maps {net.in_dim} → {net.out_dim}, system {system.name!r} needs "
            f"{system.state_dim} → {need_out} (state {', '.join(d.state)}; outputs {outs})",
            field=where,
            fix="use the policy trained for this system, or fix [dynamics]",
        )


def bayesian_spec(
    cfg: BnnConfig, net: ReluNetwork, sigmas: ReluNetwork | None = None
) -> BayesianSpec:
    """The :class:`BayesianSpec` of ``cfg.bayesian`` for ``net``: one σ per layer, or one per
    weight (``sigmas``: the network read from ``bayesian.sigma_file``, whose layers hold σ)."""
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
    if b.sigma_file is not None:
        if sigmas is None:
            raise ConfigError(
                "the σ file was not read", field="bayesian.sigma_file", fix="pass its network"
            )
        return BayesianSpec.per_weight(net, sigmas.layers, flags, b.biases)
    return BayesianSpec(sigma, flags, b.biases)
