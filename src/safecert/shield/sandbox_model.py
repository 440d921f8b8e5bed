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


WORKING = np.arange(len(LIVE))  # the 16 working states: the paper's 96 live pairs


def shield_table(allowed: np.ndarray) -> dict[str, list[str]]:
    """``{label: permitted tools}`` for :class:`safecert.shield.guard.Guard`."""
    return {LABELS[s]: [t for a, t in enumerate(TOOLS) if allowed[s, a]] for s in WORKING}


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
