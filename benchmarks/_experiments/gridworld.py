"""The 7×7 grid with known ground truth (paper Sec. V-A, docs/methods.md "Published numbers").

Cells ``r{row}c{col}`` are the abstract states; the central 3×3 block is S_u (absorbing); start and
goal are opposite corners; actions up/down/left/right/halt. A move goes where intended with
probability 1 − slip and to each perpendicular neighbour with probability slip/2; a move into the
wall stays put. K(s,a) = the (deduplicated) intended and perpendicular targets, so k ≤ 3. T = 16,
δ = 0.05, budget n0 = ⌊0.7·M·T/R⌋ with R = 160 stochastic rows.

Logging protocol (near-even coverage, docs/methods.md): M episodes of T steps, run B at a time in
lock-step; each starts at a uniformly random live state and, after entering S_u, logging resumes
(as a new episode id) from a fresh random live state, so the log has exactly M·T transitions. At each
step an episode takes the move of its current state whose row has been visited least so far (ties
and lock-step collisions broken at random). Steps are written in the order they happen (lock-step
time, then episode), which is the order the committed budget uses.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from safecert.shield.estimate import RowCounter, RowEstimates
from safecert.shield.model import ShieldModel, model_from_dict

MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
PERPENDICULAR = {"up": ("left", "right"), "down": ("left", "right"), "left": ("up", "down"),
                 "right": ("up", "down")}  # fmt: skip


@dataclass(frozen=True)
class GridSpec:
    size: int = 7
    hazard: tuple[int, int] = (2, 4)  # rows/cols lo..hi inclusive
    slip: float = 0.16
    horizon: int = 16
    delta: float = 0.05
    fraction: float = 0.7
    start: tuple[int, int] = (0, 0)
    goal: tuple[int, int] = (6, 6)

    def label(self, r: int, c: int) -> str:
        return f"r{r}c{c}"

    def is_hazard(self, r: int, c: int) -> bool:
        lo, hi = self.hazard
        return lo <= r <= hi and lo <= c <= hi

    def target(self, r: int, c: int, move: str) -> tuple[int, int]:
        dr, dc = MOVES[move]
        nr, nc = r + dr, c + dc
        return (nr, nc) if 0 <= nr < self.size and 0 <= nc < self.size else (r, c)

    def transitions(self, r: int, c: int, move: str) -> dict[tuple[int, int], float]:
        out: dict[tuple[int, int], float] = {}
        for mv, pr in ((move, 1 - self.slip), *((p, self.slip / 2) for p in PERPENDICULAR[move])):
            cell = self.target(r, c, mv)
            out[cell] = out.get(cell, 0.0) + pr
        return out


def grid_model_dict(spec: GridSpec, episodes: int) -> dict:
    """The TOML model (as a dict) of the grid, budget rule fraction·M·T/R."""
    cells = [(r, c) for r in range(spec.size) for c in range(spec.size)]
    labels = [spec.label(r, c) for r, c in cells]
    succ = {
        mv: {spec.label(r, c): sorted(spec.label(*x) for x in spec.transitions(r, c, mv))
             for r, c in cells if not spec.is_hazard(r, c)}
        for mv in MOVES
    }  # fmt: skip
    return {
        "name": f"grid{spec.size}x{spec.size}",
        "states": labels,
        "actions": [*MOVES, "halt"],
        "halt": "halt",
        "initial": spec.label(*spec.start),
        "unsafe": [spec.label(r, c) for r, c in cells if spec.is_hazard(r, c)],
        "goal": [spec.label(*spec.goal)],
        "horizon": spec.horizon,
        "delta": spec.delta,
        "budget": {"fraction_of_even_share": spec.fraction, "episodes": episodes},
        "successors": succ,
        "layout": {"rows": spec.size, "cols": spec.size, "cell_format": "r{row}c{col}",
                   "moves": {k: list(v) for k, v in MOVES.items()}},
    }  # fmt: skip


def grid_model(episodes: int, spec: GridSpec | None = None) -> ShieldModel:
    return model_from_dict(grid_model_dict(spec or GridSpec(), episodes))


def true_kernel(model: ShieldModel, spec: GridSpec | None = None) -> np.ndarray:
    """P(succ[s,a,j] | s, a) aligned with ``model.succ``."""
    spec = spec or GridSpec()
    probs = np.zeros(model.succ.shape)
    for s, lab in enumerate(model.labels):
        r, c = int(lab[1 : lab.index("c")]), int(lab[lab.index("c") + 1 :])
        for a, name in enumerate(model.actions):
            if model.k[s, a] == 1:
                probs[s, a, 0] = 1.0
                continue
            trans = spec.transitions(r, c, name)
            for j, s2 in enumerate(model.successors(s, a)):
                lab2 = model.labels[s2]
                cell = (int(lab2[1 : lab2.index("c")]), int(lab2[lab2.index("c") + 1 :]))
                probs[s, a, j] = trans.get(cell, 0.0)
    return probs


def simulate_logs(
    model: ShieldModel,
    probs: np.ndarray,
    episodes: int,
    rng: np.random.Generator,
    *,
    batch: int = 256,
    sink=None,
    n0: np.ndarray | None = None,
) -> tuple[RowEstimates, int]:
    """Run the logging protocol; return committed-budget estimates and the number of episode ids.

    ``n0`` overrides the model's committed budgets (the protocol does not look at truncation, so
    the same generator state yields the same log). ``sink(step_records)`` (optional) receives each lock-step's records in file order, as tuples
    ``(episode_id, t, s, a, s2)``; :func:`write_logs` uses it to write JSONL.
    """
    live = np.flatnonzero(model.live)
    moves = np.array([a for a in range(len(model.actions)) if a != model.halt])
    m = len(model.actions)
    counter = RowCounter(model, n0)
    cum = np.cumsum(probs, axis=-1)
    ids = 0
    for first in range(0, episodes, batch):
        b = min(batch, episodes - first)
        state = rng.choice(live, size=b)
        ep = np.arange(ids, ids + b)
        ids += b
        t = np.zeros(b, dtype=np.int64)
        for _ in range(model.horizon):
            seen = counter.visits.reshape(model.k.shape)[state][:, moves]
            action = moves[np.argmin(seen + rng.random(seen.shape), axis=1)]
            u = rng.random(b)
            j = (u[:, None] > cum[state, action]).sum(axis=1)
            j = np.minimum(j, model.k[state, action] - 1)
            nxt = model.succ[state, action, j]
            counter.add(state * m + action, j)
            if sink is not None:
                sink(list(zip(ep.tolist(), t.tolist(), state.tolist(), action.tolist(),
                              nxt.tolist(), strict=True)))  # fmt: skip
            hit = model.unsafe[nxt]
            t = np.where(hit, 0, t + 1)
            nh = int(hit.sum())
            state = np.where(hit, 0, nxt)
            if nh:
                state[hit] = rng.choice(live, size=nh)
                ep[hit] = np.arange(ids, ids + nh)
                ids += nh
    return counter.result(ids), ids


def write_logs(
    model: ShieldModel, probs: np.ndarray, episodes: int, path: Path, rng: np.random.Generator
) -> RowEstimates:
    """Run the protocol and write the JSONL log; returns the estimates it implies."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:

        def sink(records):
            fh.writelines(
                json.dumps(
                    {"episode": f"e{e}", "t": t, "state": model.labels[s],
                     "action": model.actions[a], "next_state": model.labels[s2]}
                ) + "\n"
                for e, t, s, a, s2 in records
            )  # fmt: skip

        est, _ = simulate_logs(model, probs, episodes, rng, sink=sink)
    return est


def rollout(
    model: ShieldModel,
    probs: np.ndarray,
    policy,
    episodes: int,
    rng: np.random.Generator,
    *,
    start: int | None = None,
) -> np.ndarray:
    """Run ``episodes`` closed-loop episodes of T executed calls under the true kernel.

    ``policy(t, states) -> actions`` sees the step index and the current states (vectorised);
    halt leads to the absorbing sink, S_u is absorbing. Returns a bool array: entered S_u by T.
    """
    n = model.n_states
    state = np.full(episodes, model.initial if start is None else start)
    cum = np.cumsum(probs, axis=-1)
    for t in range(model.horizon):
        active = (state < n) & ~np.r_[model.unsafe, False][state]
        if not active.any():
            break
        idx = np.flatnonzero(active)
        s = state[idx]
        a = np.asarray(policy(t, s))
        j = (rng.random(len(idx))[:, None] > cum[s, a]).sum(axis=1)
        j = np.minimum(j, model.k[s, a] - 1)
        state[idx] = model.succ[s, a, j]
    return np.r_[model.unsafe, False][state]


def adversary(model: ShieldModel, probs: np.ndarray, allowed: np.ndarray):
    """The worst admissible controller under the true kernel (argmax of the exact Q_{T−t})."""
    from safecert.shield.reach import exact_rows, value_iteration

    _, q = value_iteration(exact_rows(model, probs), allowed, model.horizon, keep_q=True)
    assert q is not None
    return lambda t, s: q[model.horizon - 1 - t][s].argmax(axis=1)


def competent(model: ShieldModel, probs: np.ndarray, allowed: np.ndarray):
    """Goal-directed controller (true kernel); a forbidden proposal is replaced by halt, and it
    halts on reaching the goal (task done)."""
    from safecert.shield.reach import exact_rows
    from safecert.shield.synthesis import goal_policy

    plan = goal_policy(model, exact_rows(model, probs))
    goal = model.goal if model.goal is not None else np.zeros(model.n_states, bool)

    def act(t: int, s: np.ndarray) -> np.ndarray:
        a = plan[t][s]
        stop = ~allowed[s, a] | goal[s]
        return np.where(stop, model.halt, a)

    return act


def random_controller(model: ShieldModel, allowed: np.ndarray, rng: np.random.Generator):
    """Uniform over the permitted non-halt actions (halt only where nothing else is permitted)."""
    moves = allowed.copy()
    moves[:, model.halt] = False
    moves[~moves.any(axis=1), model.halt] = True

    def act(t: int, s: np.ndarray) -> np.ndarray:
        w = moves[s] * rng.random(moves[s].shape)
        return w.argmax(axis=1)

    return act
