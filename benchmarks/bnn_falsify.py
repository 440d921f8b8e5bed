"""Does a positive invariant exist at ε at all?  An adversarial falsifier for continuous systems.

The verifier proves ``Inv = {x ∈ B : g(x) ≥ 0}`` closed under *every* transition
``x' = f(x, π_w(x))`` with ``w ∈ W_ε`` — the weights may differ at every step. So one trajectory
``x_0 ∈ X0, x_1, …, x_T`` with ``x_T ∈ X_u`` (or ``x_T ∉ B``) and concrete weights ``w_t ∈ W_ε`` at
every step proves that **no** positive invariant exists at this ε, for any learner and any
verifier: ``x_0`` would have to be in ``Inv`` and closure would carry it into ``X_u``. This script
searches for such a trajectory and, when it finds one, **replays it in float64** with the package's
own simulator (``System.step`` and ``networks.forward``) and checks every weight against the box
(``WeightBox.contains``, exact, no tolerance); only a trajectory that passes the replay is reported
as unsafe. Finding nothing proves nothing (the search is incomplete).

Search (three modes, each per ε and from many starts in X0):

* ``draws`` — generic: beam search where each state is expanded with ``--draws`` weight vectors
  from the box (:func:`safecert.bnn.sampling.sample_box_weights`: uniform, random vertices, the two
  corners) and the successors are ranked by how close they are to ``X_u`` (normalised distance to
  the safe box). Greedy: it does not plan.
* ``extremes`` — for policies whose Bayesian layers all see non-negative inputs and end in one
  linear output after at most one Bayesian hidden layer (``pend_all``: fixed ``[I, −I]`` layer,
  then two Bayesian layers), the set of actions the box allows at ``x`` is the interval
  ``[π_{W_lo}(x), π_{W_hi}(x)]`` for two *fixed* corner networks: ``W_hi`` takes the output
  kernel's upper end and, per hidden unit, the upper (lower) column where that output weight is
  ≥ 0 (< 0); ``W_lo`` the mirror image (an exact max/min of a separable bilinear form over a box,
  since post-ReLU inputs are ≥ 0). Every action in between is realised by the convex combination
  ``(1 − λ) W_lo + λ W_hi`` (inside the box by convexity; continuity gives all intermediate
  values). On that reduced model a grid value iteration computes, on the safe box, the largest
  normalised penetration into ``X_u`` an adversary can force (bilinear interpolation; only a
  guide), and the beam search ranks successors by it. Candidate weights per step: ``λ`` on a grid
  of ``--lambdas`` values plus ``--draws`` box draws.
* ``optimise`` — differential evolution (scipy) over the start ``x_0`` (X0's box) and one ``λ_t``
  per step for ``--opt-horizon`` steps, maximising the largest normalised penetration into ``X_u``
  along the rollout; reports the closest approach when nothing fails. Good for short escapes (the
  pendulum's 7 steps), poor for long unstable drifts (the LDS's 25–35), where ``extremes`` wins.

Assumptions of the ``extremes``/``optimise`` reduction: one policy output, a deterministic prefix
ending in a ReLU, at most two Bayesian layers, biases per the spec (``exact_interval`` in the
output says whether they hold; otherwise the corner rule is a heuristic — the weights stay in the
box and the replay still decides). The grid value iteration is 2-D only.

The grid map also answers the question approximately: it reports which share of X0 the adversary
can drive into ``X_u`` on the grid (the grid can err both ways; only the replay is evidence).

    nice -n 10 .venv/bin/python benchmarks/bnn_falsify.py --policy pend_all --sigmas 1,1.5,2 \\
        --modes extremes,draws,optimise --json /tmp/pend/falsify.json       # ≈ 75 CPU-s
    nice -n 10 .venv/bin/python benchmarks/bnn_falsify.py --policy pend_all --modes optimise \\
        --starts 1000 --sigmas 1.19,1.2,1.202                                 # the ceiling
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from safecert.bnn.config import bayesian_spec, load_policy_network
from safecert.bnn.dynamics import System
from safecert.bnn.networks import Layer, forward
from safecert.bnn.sampling import BatchedLayers, batched_forward, network_at, sample_box_weights
from safecert.bnn.sets import Box
from safecert.bnn.setup import benchmark_config
from safecert.bnn.spec import BayesianSpec, Epsilon, WeightBox
from safecert.bnn.system import box_of, build_system
from safecert.bnn.witness import corner_networks, search_segment, segment_networks


@dataclass
class Setup:
    name: str
    bench: System
    box: WeightBox
    spec: BayesianSpec
    safe: Box  # X_u = B minus the open box ``safe`` (pend: outside |th| ≤ 0.9, |thdot| ≤ 2)


def setup(name: str, sigma: float) -> Setup:
    """The system, weight box ``W_ε`` (ε = ``sigma``·σ) and safe box of a packaged benchmark,
    built exactly as ``table1_bnn.py`` builds them."""
    cfg = benchmark_config(name)
    mean, _ = load_policy_network(cfg, None)
    spec = bayesian_spec(cfg, mean)
    bench = build_system(cfg.system, cfg.dynamics, cfg.sets)
    if cfg.sets.unsafe.outside is None:
        raise SystemExit("this script needs X_u given as the outside of a box")
    safe = box_of(cfg.sets.unsafe.outside, list(cfg.dynamics.state), "sets.unsafe.outside")
    return Setup(name, bench, spec.box(mean, Epsilon(sigma, True)), spec, safe)


def danger0(s: Setup, x: np.ndarray) -> np.ndarray:
    """Normalised penetration into ``X_u``: ``max_i max(x_i − hi_i, lo_i − x_i) / half_i``;
    ``≥ 0`` exactly on ``X_u`` (closed complement of the safe box), ``< 0`` inside the safe box."""
    half = (s.safe.hi - s.safe.lo) / 2.0
    d = np.maximum(x - s.safe.hi, s.safe.lo - x) / half
    return d.max(axis=-1)


def failed(s: Setup, x: np.ndarray) -> np.ndarray:
    """``x ∈ X_u`` or ``x ∉ B`` (the two ways a trajectory refutes every invariant)."""
    return s.bench.in_unsafe(x) | ~s.bench.in_box(x)


# ---------------------------------------------------------------------------- the action interval


def exact_interval(box: WeightBox) -> bool:
    """Whether the two corner networks of :func:`safecert.bnn.witness.corner_networks` are the
    exact least and greatest action at every state: a deterministic prefix (Bayesian layers from
    index ≥ 1 only, so their inputs are ≥ 0 after a ReLU), at most two Bayesian layers, one
    output (module docstring)."""
    n = len(box.lower)
    bayes = [box.is_bayesian(k) for k in range(n)]
    first = bayes.index(True) if any(bayes) else n
    return bool(
        all(bayes[first:])
        and (first >= 1 or not any(bayes))
        and n - first <= 2
        and box.mean.layers[-1][0].shape[1] == 1
    )


def mix(lo: list[Layer], hi: list[Layer], lam: float, box: WeightBox) -> list[Layer]:
    """``W_lo + λ (W_hi − W_lo)``, clipped into the box against rounding."""
    return [(w[0], b[0]) for w, b in segment_networks(box, lo, hi, np.array([lam]))]


# ------------------------------------------------------------------------- grid value iteration


class DangerMap:
    """Value iteration on a grid over the safe box of the reduced model (actions in the interval
    ``[π_lo(x), π_hi(x)]``, ``lambdas`` points of it): ``D(x) = max(d0(x), max_u D(f(x, u)))``,
    bilinear interpolation inside the grid, ``d0`` outside it. A guide for the search only."""

    def __init__(self, s: Setup, lo: list[Layer], hi: list[Layer], n: int, lambdas: int) -> None:
        self.s = s
        self.axes = [np.linspace(a, b, n) for a, b in zip(s.safe.lo, s.safe.hi, strict=True)]
        mesh = np.stack(np.meshgrid(*self.axes, indexing="ij"), axis=-1).reshape(-1, len(self.axes))
        u_lo, u_hi = forward(lo, mesh), forward(hi, mesh)
        self.shape = tuple(len(a) for a in self.axes)
        succ = [s.bench.step(mesh, u_lo + t * (u_hi - u_lo)) for t in np.linspace(0, 1, lambdas)]
        self.succ = np.stack(succ)  # (L, N, d)
        self.d0_grid = danger0(s, mesh)
        self.d0_succ = danger0(s, self.succ)
        self.out_succ = ~s.safe.contains(self.succ) | failed(s, self.succ)
        self.value = self.d0_grid.copy()
        self._prep = self._interp_prep(self.succ.reshape(-1, self.succ.shape[-1]))

    def _interp_prep(self, x: np.ndarray):
        idx, frac = [], []
        for i, ax in enumerate(self.axes):
            t = (x[:, i] - ax[0]) / (ax[1] - ax[0])
            t = np.clip(t, 0, len(ax) - 1 - 1e-9)
            j = np.floor(t).astype(int)
            idx.append(j)
            frac.append(t - j)
        return idx, frac

    def _interp(self, grid: np.ndarray, prep) -> np.ndarray:
        (i, j), (a, b) = prep  # 2-D only
        return (
            (1 - a) * (1 - b) * grid[i, j]
            + a * (1 - b) * grid[i + 1, j]
            + (1 - a) * b * grid[i, j + 1]
            + a * b * grid[i + 1, j + 1]
        )

    def iterate(self, sweeps: int, tol: float = 1e-9) -> int:
        L, N = self.succ.shape[:2]
        for k in range(sweeps):
            grid = self.value.reshape(self.shape)
            v = self._interp(grid, self._prep).reshape(L, N)
            v = np.where(self.out_succ, self.d0_succ, v)
            new = np.maximum(self.d0_grid, v.max(axis=0))
            change = float(np.max(np.abs(new - self.value)))
            self.value = new
            if change < tol:
                return k + 1
        return sweeps

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        inside = self.s.safe.contains(x) & self.s.bench.in_box(x)
        out = danger0(self.s, x)
        if np.any(inside):
            out[inside] = self._interp(self.value.reshape(self.shape), self._interp_prep(x[inside]))
        return out


# ---------------------------------------------------------------------------------- beam search


@dataclass
class Trajectory:
    x0: np.ndarray
    weights: list[list[Layer]]


def _copy(w: list[Layer]) -> list[Layer]:
    return [(a.copy(), b.copy()) for a, b in w]


def beam_search(
    s: Setup,
    starts: np.ndarray,
    score,
    candidates,
    *,
    width: int,
    horizon: int,
    rng: np.random.Generator,
) -> Trajectory | None:
    """Beam search from ``starts``: ``candidates(xs, rng)`` gives ``(batch, k)``, ``k`` weight
    vectors per state (state-major, :data:`~safecert.bnn.sampling.BatchedLayers`); successors are
    ranked by ``score`` (higher = more dangerous) and the ``width`` best distinct ones kept.
    Returns the first trajectory whose last state fails (:func:`failed`), else None."""
    xs = np.asarray(starts, dtype=np.float64)
    hists: list[list[tuple[np.ndarray, list[Layer]]]] = [[] for _ in xs]
    for _ in range(horizon):
        batch, k = candidates(xs, rng)
        rep = np.repeat(xs, k, axis=0)
        nxt = s.bench.step(rep, batched_forward(batch, rep))
        bad = np.flatnonzero(failed(s, nxt))
        if bad.size:
            i = int(bad[0])
            hist = [*hists[i // k], (xs[i // k], _copy(network_at(batch, i)))]
            return Trajectory(hist[0][0], [w for _, w in hist])
        order = np.argsort(-score(nxt), kind="stable")
        seen: set[tuple] = set()
        keep = []
        for i in order:
            key = tuple(np.round(nxt[i], 7))
            if key not in seen:
                seen.add(key)
                keep.append(int(i))
                if len(keep) >= width:
                    break
        hists = [[*hists[i // k], (xs[i // k], _copy(network_at(batch, i)))] for i in keep]
        xs = nxt[keep]
    return None


def replay(s: Setup, traj: Trajectory) -> dict:
    """Float64 re-simulation with the concrete weights; every weight checked inside ``W_ε``
    exactly. ``unsafe`` is True only if the replayed trajectory starts in X0 and fails."""
    x = np.asarray(traj.x0, dtype=np.float64)
    ok_start = bool(s.bench.in_initial(x)) and bool(s.bench.in_box(x))
    in_box, dev, path, fail_step = True, 0.0, [x.tolist()], None
    for t, w in enumerate(traj.weights):
        in_box &= s.box.contains(w)
        for k, (wk, bk) in enumerate(w):
            sig = s.spec.sigma[k]
            if s.spec.bayesian_layers[k] and sig > 0:
                mw, mb = s.box.mean.layers[k]
                dev = max(dev, float(np.max(np.abs(wk - mw))) / sig)
                if s.spec.bayesian_biases:
                    dev = max(dev, float(np.max(np.abs(bk - mb))) / sig)
        x = s.bench.step(x, forward(w, x))
        path.append(x.tolist())
        if bool(failed(s, x[None])[0]):
            fail_step = t + 1
            break
    return {
        "unsafe": bool(ok_start and in_box and fail_step is not None),
        "start_in_x0": ok_start,
        "weights_in_box": bool(in_box),
        "length": len(traj.weights),
        "fails_at_step": fail_step,
        "max_weight_deviation_sigma": dev,
        "final_state": path[-1],
        "in_unsafe": bool(s.bench.in_unsafe(np.asarray(path[-1]))),
        "left_box": bool(not s.bench.in_box(np.asarray(path[-1]))),
        "path": path,
        "actions": [
            float(forward(w, np.asarray(x))[0]) for w, x in zip(traj.weights, path, strict=False)
        ],
        "weights": [[(w.tolist(), b.tolist()) for w, b in step] for step in traj.weights],
    }


def optimise(
    s: Setup, horizon: int, rng: np.random.Generator, evals: int
) -> tuple[Trajectory | None, int, float]:
    """Derivative-free optimisation over the start ``x_0`` (in X0's bounding box, first piece) and
    one action-interval position ``λ_t ∈ [0, 1]`` per step (weights ``(1 − λ_t) W_lo + λ_t W_hi``):
    differential evolution maximises ``max_t d0(x_t)`` over ``horizon`` steps. Returns the
    trajectory cut at its first failing state if the best point fails (else None), the number of
    rollouts evaluated and the best ``max_t d0(x_t)`` (``< 0``: how far the best rollout stayed
    inside the safe box, in units of the box's half-widths)."""

    def score(x: np.ndarray) -> np.ndarray:
        return np.where(failed(s, x), np.maximum(danger0(s, x), 0.0), danger0(s, x))

    res = search_segment(s.bench, s.box, rng, evals=evals, horizon=horizon, score=score)
    if not bool(s.bench.in_initial(res.x0)):
        return None, res.rollouts, res.best
    x = res.x0.copy()
    for t, w in enumerate(res.weights):
        x = s.bench.step(x, forward(w, x))
        if bool(failed(s, x[None])[0]):
            return Trajectory(res.x0, res.weights[: t + 1]), res.rollouts, res.best
    return None, res.rollouts, res.best


def x0_starts(s: Setup, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` states of X0: its corners and edge midpoints, then uniform samples."""
    p = s.bench.initial.pieces[0].box
    grid = np.array(np.meshgrid(*[[a, (a + b) / 2, b] for a, b in zip(p.lo, p.hi, strict=True)]))
    special = grid.reshape(len(p.lo), -1).T
    special = special[s.bench.in_initial(special)]
    return np.concatenate([special, s.bench.sample_initial(rng, max(0, n - len(special)))])


def run(
    name: str,
    sigma: float,
    mode: str,
    *,
    starts: int,
    width: int,
    horizon: int,
    draws: int,
    lambdas: int,
    grid: int,
    seed: int,
    evals: int = 200_000,
    opt_horizon: int = 12,
) -> dict:
    c0 = time.process_time()
    rng = np.random.default_rng(seed)
    s = setup(name, sigma)
    lo, hi = corner_networks(s.box)
    exact = exact_interval(s.box)
    assert s.box.contains(lo) and s.box.contains(hi)
    row: dict = {"policy": name, "sigma": sigma, "mode": mode, "exact_interval": exact}
    x0 = x0_starts(s, rng, starts)

    def stack(nets: list[list[Layer]]) -> BatchedLayers:
        return [
            (np.stack([n[j][0] for n in nets]), np.stack([n[j][1] for n in nets]))
            for j in range(len(nets[0]))
        ]

    def tile(batch: BatchedLayers, reps: int) -> BatchedLayers:
        return [(np.tile(w, (reps, 1, 1)), np.tile(b, (reps, 1))) for w, b in batch]

    def interleave(a: BatchedLayers, ka: int, b: BatchedLayers, kb: int, n: int) -> BatchedLayers:
        out = []
        for (wa, ba), (wb, bb) in zip(a, b, strict=True):
            w = np.concatenate(
                [wa.reshape(n, ka, *wa.shape[1:]), wb.reshape(n, kb, *wb.shape[1:])], 1
            )
            c = np.concatenate([ba.reshape(n, ka, -1), bb.reshape(n, kb, -1)], 1)
            out.append((w.reshape(n * (ka + kb), *w.shape[2:]), c.reshape(n * (ka + kb), -1)))
        return out

    if mode == "optimise":
        traj = None
        tried = rollouts = 0
        best = -np.inf
        for _ in range(max(1, starts // 100)):
            tried += 1
            traj, n, v = optimise(s, opt_horizon, rng, evals)
            rollouts += n
            best = max(best, v)
            if traj is not None:
                break
        row["best_max_danger"] = best
        row["restarts"] = tried
        row["starts_tried"] = rollouts  # every rollout starts from its own x_0 in X0's box
        row["cpu_s"] = time.process_time() - c0
        found = replay(s, traj) if traj is not None else None
        row["found"] = bool(found and found["unsafe"])
        if found is not None:
            row["trajectory"] = found
        return row
    if mode == "draws":
        score = lambda x: danger0(s, x)  # noqa: E731

        def cands(xs: np.ndarray, r: np.random.Generator) -> tuple[BatchedLayers, int]:
            return sample_box_weights(s.box, r, len(xs) * draws), draws

        order = np.argsort(-danger0(s, x0))
    else:
        t = time.process_time()
        dmap = DangerMap(s, lo, hi, grid, lambdas)
        row["value_iteration_sweeps"] = dmap.iterate(400)
        row["grid_s"] = time.process_time() - t
        v0 = dmap(x0)
        row["grid_x0_max_danger"] = float(v0.max())
        row["grid_x0_share_escaping"] = float(np.mean(v0 >= 0))
        row["grid_safe_share_escaping"] = float(np.mean(dmap.value >= 0))
        score = dmap
        mixes = stack([mix(lo, hi, t, s.box) for t in np.linspace(0, 1, lambdas)])

        def cands(xs: np.ndarray, r: np.random.Generator) -> tuple[BatchedLayers, int]:
            m = tile(mixes, len(xs))
            if not draws:
                return m, lambdas
            d = sample_box_weights(s.box, r, len(xs) * draws)
            return interleave(m, lambdas, d, draws, len(xs)), lambdas + draws

        order = np.argsort(-v0)
    # starts ranked by danger, searched in batches of ``width``
    found = None
    tried = 0
    for k in range(0, len(x0), width):
        batch = x0[order[k : k + width]]
        tried += len(batch)
        traj = beam_search(s, batch, score, cands, width=width, horizon=horizon, rng=rng)
        if traj is not None:
            found = replay(s, traj)
            if found["unsafe"]:
                break
    row["starts_tried"] = tried
    row["cpu_s"] = time.process_time() - c0
    row["found"] = bool(found and found["unsafe"])
    if found is not None:
        row["trajectory"] = found
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--policy", default="pend_all")
    ap.add_argument("--sigmas", default="1,1.5,2", help="ε values in σ")
    ap.add_argument("--modes", default="extremes,draws,optimise")
    ap.add_argument("--starts", type=int, default=400, help="X0 states tried per ε and mode")
    ap.add_argument("--width", type=int, default=50, help="beam width (also starts per batch)")
    ap.add_argument("--horizon", type=int, default=300)
    ap.add_argument("--draws", type=int, default=16, help="box weight draws per state and step")
    ap.add_argument("--lambdas", type=int, default=11, help="points of the action interval")
    ap.add_argument("--grid", type=int, default=301, help="grid points per axis (value iteration)")
    ap.add_argument("--evals", type=int, default=200_000, help="optimise: rollouts per restart")
    ap.add_argument("--opt-horizon", type=int, default=12, help="optimise: steps optimised")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    rows = []
    for sigma in (float(v) for v in args.sigmas.split(",")):
        for mode in args.modes.split(","):
            row = run(
                args.policy,
                sigma,
                mode,
                starts=args.starts,
                width=args.width,
                horizon=args.horizon,
                draws=args.draws,
                lambdas=args.lambdas,
                grid=args.grid,
                seed=args.seed,
                evals=args.evals,
                opt_horizon=args.opt_horizon,
            )
            rows.append(row)
            tr = row.get("trajectory")
            extra = ""
            if "best_max_danger" in row:
                extra = f" closest approach to X_u: max_t d0 = {row['best_max_danger']:.3g}"
            if "grid_x0_share_escaping" in row:
                extra = (
                    f" grid: X0 share escaping {row['grid_x0_share_escaping']:.3f}, "
                    f"max danger {row['grid_x0_max_danger']:.3f}"
                )
            what = "nothing found"
            if row["found"]:
                what = (
                    f"UNSAFE trajectory replayed: {tr['length']} steps, fails at step "
                    f"{tr['fails_at_step']} ({'X_u' if tr['in_unsafe'] else 'left B'}), "
                    f"max |w−μ| = {tr['max_weight_deviation_sigma']:.4f}σ"
                )
            print(
                f"{args.policy} {sigma:g}σ {mode}: {row['starts_tried']} "
                f"{'rollouts' if mode == 'optimise' else 'starts'}, "
                f"{row['cpu_s']:.1f} CPU-s, {what}.{extra}",
                flush=True,
            )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
