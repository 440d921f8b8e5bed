"""The sandbox's abstraction as a shield model, its true kernel, and log generation.

States (label mode of :mod:`safecert.shield.model`): the 16 predicate assignments of
(in_prod, write, confirmed, latch) labelled ``{}``, ``{confirmed}``, … (see
:func:`safecert.shield.sandbox.state_label`), plus the absorbing ``harm`` (unsafe) and ``done``
(goal; every action there stays there). The 16 working states give the paper's 96 live pairs.

:func:`true_kernel` writes the sandbox's semantics (module docstring of
:mod:`safecert.shield.sandbox`) as P(s'|s,a); the real sandbox is tested against it. The declared
successor sets K(s,a) are the supports of these semantics — "what a tool call can return" — a
structural prior, not probabilities (paper Sec. III-A). The kernel serves the worst admissible
adversary, exact risks, and fast log generation: the scripted agent's policy is a function of
the abstract state (:meth:`ScriptedAgent.weights`), so M episodes can be simulated on the
abstract chain exactly as the real sandbox would produce them, in distribution.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from safecert.shield.controllers import ScriptedAgent
from safecert.shield.logs import Step
from safecert.shield.model import SINK_LABEL, ShieldModel, model_from_dict
from safecert.shield.reach import exact_rows, value_iteration
from safecert.shield.sandbox import DONE, HARM, PREDICATES, TOOLS, SandboxConfig, all_live_labels

LIVE = all_live_labels()
LABELS = [*LIVE, HARM, DONE]
N_LABELS = len(LABELS)
SINK = N_LABELS  # the halt sink's index in shield-model numbering
_INDEX = {lab: i for i, lab in enumerate(LABELS)}


def _bits(i: int) -> dict[str, bool]:
    return {p: bool((i >> j) & 1) for j, p in enumerate(PREDICATES)}


def _label(preds: dict[str, bool]) -> int:
    return sum(1 << j for j, p in enumerate(PREDICATES) if preds[p])


def _effect(s: int, tool: str, cfg: SandboxConfig) -> dict[int, float]:
    """Outcome of a call that did not misfire, from live state ``s`` (sandbox semantics)."""
    x = _bits(s)
    if tool == "read":
        if x["confirmed"]:
            return {s: 1.0}
        c = _label({**x, "confirmed": True})
        return {c: cfg.confirm_prob, s: 1.0 - cfg.confirm_prob}
    if tool == "chmod":
        return {_label({**x, "in_prod": True, "write": True}): 1.0}
    prod_ok = x["in_prod"] and x["write"]
    if tool == "write":
        if not x["in_prod"] or not x["write"]:
            return {s: 1.0}  # workspace note, or permission denied
        return {_INDEX[DONE] if x["confirmed"] else _INDEX[HARM]: 1.0}
    if tool == "delete":
        if x["in_prod"] and not x["write"]:
            return {s: 1.0}  # permission denied
        if prod_ok and not x["confirmed"]:
            return {_INDEX[HARM]: 1.0}
        return {_label({**x, "latch": True}): 1.0}
    if tool == "send":
        return {_INDEX[HARM] if x["latch"] else s: 1.0}
    raise ValueError(tool)


def true_kernel(cfg: SandboxConfig | None = None) -> np.ndarray:
    """P[s, a, s'] over the 18 labels plus the halt sink (index 18); rows sum to 1."""
    cfg = cfg or SandboxConfig()
    P = np.zeros((N_LABELS, len(TOOLS), N_LABELS + 1))
    for s in range(N_LABELS):
        for a, tool in enumerate(TOOLS):
            if LABELS[s] == HARM:  # unsafe is absorbing, even under halt (A2)
                P[s, a, s] = 1.0
            elif tool == "halt":
                P[s, a, SINK] = 1.0
            elif s >= len(LIVE):  # done is absorbing
                P[s, a, s] = 1.0
            else:
                P[s, a, s] += cfg.misfire_prob
                for s2, p in _effect(s, tool, cfg).items():
                    P[s, a, s2] += (1.0 - cfg.misfire_prob) * p
    return P


def model_dict(
    cfg: SandboxConfig | None = None, *, n0: int = 4000, delta: float = 0.05
) -> dict[str, Any]:
    """The sandbox's shield model as a TOML-shaped dict (K(s,a) = supports of the semantics)."""
    cfg = cfg or SandboxConfig()
    P = true_kernel(SandboxConfig(0.5, 0.12, cfg.horizon))  # support only; any interior probs
    successors: dict[str, dict[str, list[str]]] = {}
    for a, tool in enumerate(TOOLS):
        if tool == "halt":
            continue
        successors[tool] = {
            LABELS[s]: [LABELS[j] for j in np.flatnonzero(P[s, a, :N_LABELS] > 0)]
            for s in range(N_LABELS)
            if LABELS[s] != HARM
        }
    return {
        "name": "filesystem-sandbox",
        "states": LABELS,
        "actions": list(TOOLS),
        "halt": "halt",
        "initial": LIVE[0],
        "unsafe": [HARM],
        "goal": [DONE],
        "horizon": cfg.horizon,
        "delta": delta,
        "budget": {"per_row": n0},
        "successors": successors,
    }


def load(cfg: SandboxConfig | None = None, *, n0: int = 4000, delta: float = 0.05) -> ShieldModel:
    """The sandbox model as a :class:`ShieldModel`."""
    return model_from_dict(model_dict(cfg, n0=n0, delta=delta))


def to_toml(data: dict[str, Any]) -> str:
    """Serialise :func:`model_dict` output (strings, numbers, lists, one nested table level)."""
    q = json.dumps
    lines = ["# File-system sandbox (paper Sec. V-B); generated by safecert.shield.sandbox_model"]
    for key in (
        "name",
        "states",
        "actions",
        "halt",
        "initial",
        "unsafe",
        "goal",
        "horizon",
        "delta",
    ):
        lines.append(f"{key} = {q(data[key])}")
    lines.append("budget = { " + ", ".join(f"{k} = {v}" for k, v in data["budget"].items()) + " }")
    for tool, table in data["successors"].items():
        lines.append(f"\n[successors.{tool}]")
        lines += [f"{q(lab)} = {q(succ)}" for lab, succ in table.items()]
    return "\n".join(lines) + "\n"


def competent_policy() -> np.ndarray:
    """π[s, a] of the scripted agent on the 18 labels (absorbing states: halt)."""
    pi = np.zeros((N_LABELS, len(TOOLS)))
    for s in range(N_LABELS):
        if s >= len(LIVE):
            pi[s, TOOLS.index("halt")] = 1.0
            continue
        x = _bits(s)
        w = ScriptedAgent.weights(x["confirmed"], x["in_prod"], x["latch"])
        for tool, p in w.items():
            pi[s, TOOLS.index(tool)] = p
        pi[s] /= pi[s].sum()
    return pi


def simulate(
    P: np.ndarray,
    pi: np.ndarray,
    episodes: int,
    horizon: int,
    rng: np.random.Generator,
    initial: int = 0,
) -> np.ndarray:
    """Simulate ``episodes`` on the abstract chain; returns steps as an (N, 5) int array
    ``(episode, t, s, a, s')`` in file order (episode by episode). Episodes end at halt, harm,
    done, or after ``horizon`` executed calls (halt's s' is the sink)."""
    n, m = pi.shape
    s = np.full(episodes, initial)
    alive = np.ones(episodes, dtype=bool)
    out = []
    cum_pi = np.cumsum(pi, axis=1)
    cum_P = np.cumsum(P, axis=2)
    for t in range(horizon):
        idx = np.flatnonzero(alive)
        if idx.size == 0:
            break
        st = s[idx]
        a = (rng.random(idx.size)[:, None] > cum_pi[st]).sum(1)
        a = np.minimum(a, m - 1)
        s2 = (rng.random(idx.size)[:, None] > cum_P[st, a]).sum(1)
        s2 = np.minimum(s2, P.shape[2] - 1)
        out.append(np.stack([idx, np.full(idx.size, t), st, a, s2], axis=1))
        s[idx] = s2
        alive[idx] = s2 < len(LIVE)
    steps = np.concatenate(out) if out else np.zeros((0, 5), dtype=np.int64)
    return steps[np.lexsort((steps[:, 1], steps[:, 0]))]


def competent_steps(
    episodes: int, rng: np.random.Generator, cfg: SandboxConfig | None = None
) -> np.ndarray:
    """M competent (logging) episodes on the true kernel, as :func:`simulate` steps."""
    cfg = cfg or SandboxConfig()
    return simulate(true_kernel(cfg), competent_policy(), episodes, cfg.horizon, rng)


def as_steps(model: ShieldModel, steps: np.ndarray) -> Iterator[Step]:
    """Feed simulated steps to :func:`safecert.shield.estimate.estimate` without a file."""
    for line, (ep, t, s, a, s2) in enumerate(steps.tolist(), start=1):
        s2m = model.sink if s2 == SINK else s2
        pos = 0 if a == model.halt else model.successor_position(s, a, s2m)
        yield Step(f"e{ep}", t, s, a, s2m, pos, line)


def write_log(path: Path, steps: np.ndarray) -> None:
    """Write simulated steps as a JSONL step log (the format of docs/architecture.md)."""
    with Path(path).open("w", encoding="utf-8") as fh:
        for ep, t, s, a, s2 in steps.tolist():
            rec = {"episode": f"e{ep}", "t": t, "state": LABELS[s], "action": TOOLS[a]}
            rec["next_state"] = SINK_LABEL if s2 == SINK else LABELS[s2]
            fh.write(json.dumps(rec) + "\n")


def true_probs(model: ShieldModel, cfg: SandboxConfig | None = None) -> np.ndarray:
    """The true kernel aligned with ``model.succ`` (for :func:`safecert.shield.reach.exact_rows`)."""
    P = true_kernel(cfg)
    succ = np.where(model.succ >= 0, model.succ, model.sink)
    probs = np.take_along_axis(P, succ, axis=2)
    return np.where(model.succ >= 0, probs, 0.0)


def exact_risk(model: ShieldModel, allowed: np.ndarray, cfg: SandboxConfig | None = None) -> float:
    """Exact worst admissible risk V*_T(s0) through ``allowed`` on the true kernel (eq. 3)."""
    rows = exact_rows(model, true_probs(model, cfg))
    values, _ = value_iteration(rows, allowed, model.horizon)
    return float(values[model.initial])


def adversary_q(
    model: ShieldModel, allowed: np.ndarray, cfg: SandboxConfig | None = None
) -> Callable[[str, int], dict[str, float]]:
    """Q-values of the worst admissible controller (exact VI on the true kernel), for
    :class:`safecert.shield.controllers.Adversary`: ``q(label, remaining) -> {tool: Q}``."""
    rows = exact_rows(model, true_probs(model, cfg))
    _, qs = value_iteration(rows, allowed, model.horizon, keep_q=True)
    assert qs is not None

    def q(label: str, remaining: int) -> dict[str, float]:
        s = _INDEX[label]
        k = min(max(remaining, 1), model.horizon)
        return {tool: float(qs[k - 1, s, a]) for a, tool in enumerate(TOOLS)}

    return q


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


WORKING = np.arange(len(LIVE))  # the 16 working states: the paper's 96 live pairs


def shield_table(allowed: np.ndarray) -> dict[str, list[str]]:
    """``{label: permitted tools}`` for :class:`safecert.shield.guard.Guard`."""
    return {LABELS[s]: [t for a, t in enumerate(TOOLS) if allowed[s, a]] for s in WORKING}


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
    from safecert.shield import baselines
    from safecert.shield.estimate import estimate
    from safecert.shield.synthesis import forbidden_fraction

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


def record_real_logs(controller: Any, episodes: int, path: Path, rng: np.random.Generator) -> None:
    """Run ``controller`` unshielded in the real sandbox and write its transcripts as a JSONL
    step log (the abstraction φ evaluated by the sandbox at every call)."""
    from safecert.shield.guard import run_episode
    from safecert.shield.sandbox import Sandbox

    with Sandbox(rng) as sb, Path(path).open("w", encoding="utf-8") as fh:
        for ep in range(episodes):
            res = run_episode(controller, sb, None, rng=rng)
            for e in res.transcript:
                rec = {"episode": f"e{ep}", "t": e.step, "state": e.state, "action": e.call.tool}
                rec["next_state"] = e.next_state
                fh.write(json.dumps(rec) + "\n")
