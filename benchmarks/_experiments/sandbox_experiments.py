"""Table III and Experiment 4 on the file-system sandbox (paper Sec. V-B): experiment code.

Built on the sandbox's shield model (:mod:`safecert.shield.sandbox_model`): the exact behaviour of
the scripted agent behind a shield, one seed of Table III (every shield with its certified bound,
exact worst admissible risk and the agent's behaviour), the exploration policy of the development
logs and the coarsened abstractions Experiment 4 uses to show a missing predicate breaking A1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from safecert.shield import baselines
from safecert.shield import sandbox_model as sm
from safecert.shield.estimate import estimate
from safecert.shield.model import ShieldModel, model_from_dict
from safecert.shield.sandbox import DONE, HARM, PREDICATES, TOOLS, SandboxConfig
from safecert.shield.sandbox_model import (
    LABELS,
    LIVE,
    N_LABELS,
    SINK,
    as_steps,
    competent_policy,
    competent_steps,
    exact_risk,
    load,
    model_dict,
    true_kernel,
)
from safecert.shield.synthesis import forbidden_fraction

_INDEX = sm._INDEX
_bits = sm._bits


@dataclass(frozen=True)
class Behaviour:
    """Exact outcome of the scripted agent behind a shield with halt substitution."""

    success: float
    unsafe: float
    interventions_per_call: float
    mean_length: float


def competent_behaviour(
    allowed: np.ndarray, cfg: SandboxConfig | None = None, pi: np.ndarray | None = None
) -> Behaviour:
    """Propagate the state distribution of the scripted agent (policy ``pi``, default
    :func:`competent_policy`) through ``allowed`` on the true kernel: a forbidden proposal is
    replaced by halt (one intervention, then halt executes). Exact, no sampling."""
    cfg = cfg or SandboxConfig()
    P = true_kernel(cfg)
    pi = competent_policy() if pi is None else pi
    ok = allowed[:N_LABELS].astype(bool)
    ok_pi = pi * ok
    blocked = (pi * ~ok).sum(1)  # probability the proposal is forbidden
    step = ok_pi[:, :, None] * P  # (s, a, s')
    step = step.sum(1)
    step[:, SINK] += blocked
    dist = np.zeros(N_LABELS + 1)
    dist[0] = 1.0
    calls = interventions = 0.0
    live = np.r_[np.ones(len(LIVE), bool), False, False, False]
    for _ in range(cfg.horizon):
        active = dist * live
        calls += active.sum()
        interventions += (active[:N_LABELS] * blocked).sum()
        dist = dist * ~live + active[:N_LABELS] @ step
    return Behaviour(
        success=float(dist[_INDEX[DONE]]),
        unsafe=float(dist[_INDEX[HARM]]),
        interventions_per_call=float(interventions / max(calls, 1e-300)),
        mean_length=float(calls),
    )


def table3_rows(
    seed: int,
    *,
    episodes: int = 4000,
    epsilon: float = 0.05,
    methods: tuple[str, ...] = ("robust_q", "additive", "greedy"),
    cfg: SandboxConfig | None = None,
) -> list[dict[str, Any]]:
    """One seed of Table III: fresh competent logs, every shield, and per shield the certified
    bound, the exact worst admissible risk, and the scripted agent's exact behaviour."""
    cfg = cfg or SandboxConfig()
    model = load(cfg)
    ss = np.random.SeedSequence(seed)
    log_rng, dir_rng = (np.random.default_rng(s) for s in ss.spawn(2))
    steps = competent_steps(episodes, log_rng, cfg)
    est = estimate(model, as_steps(model, steps))
    full = baselines.full_counts(model, as_steps(model, steps))
    harmed = int((steps[:, 4] == _INDEX[HARM]).sum())
    shields = [baselines.ours(model, est, epsilon, m) for m in methods]
    shields += [
        baselines.plug_in(model, full, epsilon, methods[0]),
        baselines.policy_specific(model, episodes, harmed),
        baselines.count_threshold(model, full),
    ]
    dir_rows = baselines.dirichlet_rows(model, full, dir_rng)
    for m in methods:
        shields.append(baselines.synthesized(f"dirichlet ({m})", model, dir_rows, full, epsilon, m))
    out = []
    for sh in shields:
        beh = competent_behaviour(sh.allowed, cfg)
        out.append(
            {
                "name": sh.name,
                "bound": sh.bound,
                "adversary_unsafe": exact_risk(model, sh.allowed, cfg),
                "success": beh.success,
                "forbidden_pct": 100.0 * forbidden_fraction(model, sh.allowed),
                "intervention_rate": beh.interventions_per_call,
                "mean_length": beh.mean_length,
            }
        )
    return out


def explore_policy() -> np.ndarray:
    """Exploration (development) logs: uniform over the five non-halt tools in working states."""
    pi = np.zeros((N_LABELS, len(TOOLS)))
    pi[: len(LIVE), :] = 1.0
    pi[: len(LIVE), TOOLS.index("halt")] = 0.0
    pi[len(LIVE) :, TOOLS.index("halt")] = 1.0
    return pi / pi.sum(1, keepdims=True)


def coarsened(drop: str, cfg: SandboxConfig | None = None) -> tuple[ShieldModel, np.ndarray]:
    """The abstraction without predicate ``drop``: its model (K = images of the fine K) and the
    map from fine indices (labels + sink) to coarse ones. Used by Experiment 4 to show that a
    missing predicate breaks A1."""
    if drop not in PREDICATES:
        raise ValueError(f"unknown predicate {drop!r}")
    kept = [p for p in PREDICATES if p != drop]

    def coarse_label(i: int) -> str:
        if i >= len(LIVE):
            return LABELS[i]
        x = _bits(i)
        return "{" + ",".join(p for p in kept if x[p]) + "}"

    labels = list(dict.fromkeys(coarse_label(i) for i in range(N_LABELS)))
    index = {lab: j for j, lab in enumerate(labels)}
    fine_to_coarse = np.array([index[coarse_label(i)] for i in range(N_LABELS)] + [len(labels)])
    fine = model_dict(cfg)
    successors: dict[str, dict[str, list[str]]] = {}
    for tool, table in fine["successors"].items():
        merged: dict[str, list[str]] = {}
        for lab, succ in table.items():
            c = labels[fine_to_coarse[_INDEX[lab]]]
            images = [labels[fine_to_coarse[_INDEX[x]]] for x in succ]
            merged[c] = list(dict.fromkeys(merged.get(c, []) + images))
        successors[tool] = merged
    data = {**fine, "name": f"filesystem-sandbox-without-{drop}", "states": labels}
    data["initial"] = labels[0]
    data["successors"] = successors
    return model_from_dict(data), fine_to_coarse
