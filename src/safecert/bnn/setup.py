"""A BNN run's config, validated whole at the door: keys, system and search plan.

:func:`load_config` reads a TOML file, :func:`benchmark_config` builds one of the published
systems; both end with :func:`check_config`, the checks that need more than one key (the system
compiles, the ε search plan exists). The config models themselves (:mod:`safecert.bnn.config`) import
nothing above them; this module sits above the system and the search it checks against.
"""

from __future__ import annotations

from pathlib import Path

from safecert.bnn.config import BnnConfig
from safecert.bnn.networks import BENCHMARK_POLICIES, SCALE_POLICIES
from safecert.bnn.search import search_plan
from safecert.bnn.system import benchmark_tables, build_system
from safecert.config import parse_model, read_toml
from safecert.errors import ConfigError

__all__ = [
    "BENCHMARKS",
    "COMMAND_LINE_KEYS",
    "benchmark_config",
    "check_config",
    "load_config",
    "with_options",
]


def load_config(path: Path) -> BnnConfig:
    """The config at ``path``, validated whole at the door: the keys (pydantic), the system
    (:func:`~safecert.bnn.system.build_system`) and the ε search plan."""
    cfg = parse_model(BnnConfig, read_toml(path))
    check_config(cfg)
    return cfg


def check_config(cfg: BnnConfig) -> None:
    """Every check that needs more than one key: the system compiles, the search plan exists."""
    build_system(cfg.system, cfg.dynamics, cfg.sets)
    search_plan(cfg)


#: the keys ``safecert bnn verify``'s options set over a config file (:func:`with_options`):
#: ``--epsilon``, ``--seed``, ``--time-limit`` and ``--search``. ``safecert verify`` holds every
#: other key of ``parameters`` to the hashed config file.
COMMAND_LINE_KEYS = ("epsilon", "seed", "limits.per_epsilon_s", "search.enabled")


def with_options(
    cfg: BnnConfig,
    *,
    epsilon: str | None = None,
    seed: int | None = None,
    time_limit: float | None = None,
    search: bool = False,
) -> BnnConfig:
    """``cfg`` with the command line's options applied (only the :data:`COMMAND_LINE_KEYS`),
    validated again whole; ``None``/``False`` leaves a key as the config has it."""
    if time_limit is not None and not time_limit > 0:
        raise ConfigError(f"must be > 0, got {time_limit}", field="--time-limit", fix="e.g. 60")
    data = cfg.model_dump()
    if epsilon is not None:
        data["epsilon"] = epsilon
    if seed is not None:
        data["seed"] = seed
    if time_limit is not None:
        data["limits"]["per_epsilon_s"] = time_limit
    if search:
        data["search"]["enabled"] = True
    if data == cfg.model_dump():
        return cfg
    out = parse_model(BnnConfig, data)
    check_config(out)
    return out


#: ``--benchmark`` names: the six published policies, and the LDS ones with the published code's
#: initial set ``‖x‖∞ ≤ 0.4`` (``*_x04``; plain ``lds`` uses the paper's 0.6), and the 3-D lane keeping
#: and 4-D cart-pole, lane-keeping-with-actuator and reactor systems (``lane``, ``cartpole``,
#: ``lane4``, ``reactor``;
#: σ = 0.1 on the output layer, as ``lds``;
#: ``limits.max_iterations = 1000``)
BENCHMARKS = (*BENCHMARK_POLICIES, "lds_x04", "lds_all_x04", *SCALE_POLICIES)


def benchmark_config(name: str, **overrides: object) -> BnnConfig:
    """The published setup of one of the six policies (README of the data; Appendix C):
    σ = 0.1 from the second layer on, or 0.05 after the fixed ``[I, −I]`` layer of ``*_all``;
    kernels only; invariant width 12 (LDS, pendulum) or 32 (collision avoidance). The system's
    dynamics and sets are the packaged tables (:func:`~safecert.bnn.system.benchmark_tables`)."""
    if name not in BENCHMARKS:
        raise ConfigError(
            f"unknown benchmark {name!r}",
            field="benchmark",
            fix=f"use one of {', '.join(BENCHMARKS)}",
        )
    policy = name.removesuffix("_x04")
    system = policy.removesuffix("_all") + ("_x04" if name.endswith("_x04") else "")
    tables = benchmark_tables(system)
    data: dict[str, object] = {
        "policy": f"benchmark:{policy}",
        "system": tables["system"],
        "dynamics": tables["dynamics"],
        "sets": tables["sets"],
        "bayesian": {"sigma": 0.05 if policy.endswith("_all") else 0.1, "first_layer": 1},
        "invariant": {
            "hidden": [32] if system == "car" else [16] if policy in SCALE_POLICIES else [12]
        },
    }
    if policy in SCALE_POLICIES:  # 3-D / 4-D: more learner rounds than the 2-D default of 200,
        # and the closure question asked on four quarters of the step domain (--workers in
        # parallel; lane at 0.5σ: 149 rounds against 287 with halves, benchmarks/RESULTS_bnn_scale.md)
        data["limits"] = {"max_iterations": 1000}
        data["verifier"] = {"closure_splits": 2}
    if policy in ("lane4", "reactor"):  # 50 000 sampled closure checks before each MILP (a few
        # ms each round): the 4-D closure MILP costs ≈ 8–10 CPU-s a call, and most candidates'
        # violations are found by sampling first (benchmarks/RESULTS_bnn_scale.md, session 4)
        data["data"] = {"falsifier_samples": 50_000}
    data.update(overrides)
    cfg = parse_model(BnnConfig, data)
    check_config(cfg)
    return cfg
