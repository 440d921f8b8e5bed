"""What ``safecert certify`` checks on the real environment before any stored episode, and the
observation ranges it fixes (called by :func:`safecert.blackbox.certify.make_context`).

1. **Health check** — the policy answers a real first observation (the nominal env reset with the
   run's seed); the reply must have the action space's type and shape
   (:func:`safecert.blackbox.rollout.action_mismatch`), else one :class:`OracleError` line.
2. **Spec check** — one nominal episode (not stored; seeds of its own) played with the spec
   evaluated strictly: a key the environment's ``info`` never holds, or an index outside the
   observation or action, is one :class:`ConfigError` line naming it and what the env provides.
3. **Ranges** — declared, space or (asked for) estimated with the reference policy
   (:mod:`safecert.blackbox.ranges`).
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import numpy as np

from safecert.blackbox.jobs import EpisodeJob
from safecert.blackbox.oracles import Oracle, OracleFailure, make_oracle
from safecert.errors import ConfigError, OracleError

if TYPE_CHECKING:
    from safecert.blackbox.plan import RunPlan

PREFLIGHT_CELL = 2**31 - 2


def check_policy_and_spec(plan: RunPlan, oracle: Oracle) -> None:
    """The health check (reply type and shape on a real observation) and the spec check (one
    strict nominal episode); see the module docstring.

    A policy or environment that runs in a worker process takes strict turns with this thread,
    one round trip a step, as in the run's episodes: so, like them, the check runs on one CPU
    with its workers (:func:`safecert.isolation.colocated`; a round trip between two CPUs costs
    several times one on a CPU). Execution only: what is checked and its outcome do not change."""
    from safecert.isolation import colocated

    with colocated() if plan.has_workers else nullcontext():
        _check(plan, oracle)


def _check(plan: RunPlan, oracle: Oracle) -> None:
    from safecert.blackbox.jobs import episode_seed
    from safecert.blackbox.rollout import SpecFailure, action_mismatch, run_lockstep

    env = plan.fresh_base_env()
    try:
        sample, _ = env.reset(seed=plan.config.seed)
        first = np.asarray(sample, dtype=np.float64)[None]
        oracle.probe(first)
        try:
            reply = np.asarray(oracle.act(first))
        except OracleFailure as exc:
            raise OracleError(f"failed its health check: {exc.reason}", field="policy") from None
        why = action_mismatch(env.action_space, reply[0])
        if why is not None:
            raise OracleError(
                f"replied {reply.dtype} of shape {reply.shape[1:]} to a real first observation: "
                f"{why}",
                field="policy",
                fix="make the policy return one action of the environment's action space per row",
            )
        config = plan.config.model_copy(update={"max_steps": plan.config.max_steps or 1000})
        job = EpisodeJob(PREFLIGHT_CELL, 0, episode_seed(config.seed, PREFLIGHT_CELL, 0))
        try:
            list(run_lockstep([env], [job], oracle.act, config, strict=True))
        except SpecFailure as exc:
            raise ConfigError(
                f"{exc.reason} (checked on one nominal episode before the run)",
                field=exc.field,
                fix=_spec_fix(exc.reason, env),
            ) from None
    finally:
        env.close()


def _spec_fix(reason: str, env: Any) -> str:
    """How to repair a spec the nominal episode could not evaluate: an index outside ``obs`` or
    ``action`` gets their sizes and valid ranges; a missing key the explicit-default advice."""
    if "out of range" not in reason:
        return 'use what the environment provides, or write an explicit default such as info.get("KEY", 0)'
    sizes = []
    for name, space in (("obs", env.observation_space), ("action", env.action_space)):
        shape = getattr(space, "shape", None) or ()
        if shape:
            n = int(shape[0])
            sizes.append(f"{name} has {n} entries (index 0 to {n - 1}, or -{n} to -1)")
        else:
            sizes.append(f"{name} is a single number (no index: write {name})")
    return "index within the sizes: " + "; ".join(sizes)


def compute_ranges(plan: RunPlan) -> dict[str, Any]:
    """The run's observation ranges (declared, space, or estimated with the reference policy)."""
    from safecert.blackbox.ranges import random_reference, run_ranges
    from safecert.blackbox.rollout import make_base_env

    def reference() -> tuple[Any, Any]:
        if plan.reference is not None:
            ref = make_oracle(plan.reference)
            return ref.act, ref.close
        env = make_base_env(plan.config, plan.base_dir)
        space = env.action_space
        env.close()
        return random_reference(space, plan.config.seed), lambda: None

    return run_ranges(plan.config, plan.base_dir, reference)
