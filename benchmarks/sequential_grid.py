"""Episodes to decide a paper-like 3×3 grid, sequential vs the fixed N = 10,000 protocol.

Simulated cells: each cell's episodes are Bernoulli draws at the unified failure rate the paper
measured for that cell (CORE-RL Tables C.?/D.55 and B.?, TRPO-Lagrangian under Gaussian noise,
N = 10,000): "ant" (SafetyAnt: one passing cell at 0.0081, eight failing at 0.13–0.93, the
issue's case), "point" (SafetyPointGoal: three passing at ≈ 0.03, six failing) and "car"
(SafetyCar: three cells at 0.044–0.046, right at p* = 0.05, where fixed N itself barely decides).

For every replication the same 10,000-outcome sequence of each cell is judged by fixed N
(Clopper–Pearson on all 10,000 at δ/9) and by each sequential rule at δ/9 with cap 10,000,
scheduled as ``safecert certify --sequential`` does with one worker and ``batch_size = 1``: a
decision on each completed episode, so ``run`` (episodes run) is the decision point (with W workers
× B, at most W·B more run: benchmarks/sequential_overshoot.py).
"Fixed N decides" a cell when its upper bound ≤ p* (PASS) or its lower bound > p* (FAIL).

``--real N`` also certifies real CartPole-v1 episodes on a 3×3 noise grid with fixed N and\nsequentially (cap N) and compares decisions and episodes.\n\nAlso: zero-failure cells (p = 0) at p* = 0.05, 90 %, M = 1 vs the fixed-N optimum of 45.

    .venv/bin/python benchmarks/sequential_grid.py [--reps 200]
    .venv/bin/python benchmarks/sequential_grid.py --reps 0 --real 2000   # only the real run

Writes ``benchmarks/out/sequential_grid.json`` and ``sequential_grid.png``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from safecert.stats import cp_lower, cp_upper, zero_failure_episodes
from safecert.stats.sequential import FAIL, PASS, stopping_index
from safecert.stats.sequential_plan import make_rule

GRIDS = {
    "ant": [0.0081, 0.9198, 0.9200, 0.1312, 0.9188, 0.9274, 0.3600, 0.9214, 0.9252],
    "point": [0.0287, 0.3889, 0.6739, 0.0310, 0.3965, 0.6728, 0.0296, 0.3955, 0.6815],
    "car": [0.0460, 0.7406, 0.8338, 0.0444, 0.7434, 0.8418, 0.0435, 0.7480, 0.8420],
}
METHODS = ("mixture", "looks", "betting", "curtail")
N_FIXED = 10_000
OUT = Path(__file__).resolve().parent / "out"


def fixed_decision(k: int, n: int, delta: float, p_star: float) -> str:
    if cp_upper(k, n, delta).value <= p_star:
        return PASS
    return FAIL if cp_lower(k, n, delta).value > p_star else "FAIL (not decided)"


def scheduled(rule, x: np.ndarray):
    """Decision and episodes run by the certify scheduler (one worker, batch 1): it stops at the
    decision point."""
    res = rule.decide(x)
    assert stopping_index(rule, x) == res.episodes
    return res, res.episodes


def run_grid(
    name: str, rates: list[float], reps: int, p_star: float, delta: float, seed: int
) -> dict:
    m = len(rates)
    dc = delta / m
    rules = {meth: make_rule(meth, p_star, dc, N_FIXED) for meth in METHODS}
    rng = np.random.default_rng([seed, len(name)])
    used = {meth: np.zeros((reps, m)) for meth in METHODS}
    run = {meth: np.zeros((reps, m)) for meth in METHODS}
    agree = {
        meth: [0, 0, 0] for meth in METHODS
    }  # same, different, inconclusive where fixed decides
    fixed_decided = 0
    for r in range(reps):
        for c, p in enumerate(rates):
            x = (rng.random(N_FIXED) < p).astype(np.int8)
            fixed = fixed_decision(int(x.sum()), N_FIXED, dc, p_star)
            fixed_decided += fixed in (PASS, FAIL)
            for meth, rule in rules.items():
                res, n_run = scheduled(rule, x)
                used[meth][r, c] = res.episodes
                run[meth][r, c] = n_run
                if fixed in (PASS, FAIL):
                    if res.decision == fixed:
                        agree[meth][0] += 1
                    elif res.decision in (PASS, FAIL):
                        agree[meth][1] += 1
                    else:
                        agree[meth][2] += 1
    out = {
        "rates": rates,
        "family_size": m,
        "delta_cell": dc,
        "reps": reps,
        "fixed_decided_cells": fixed_decided,
        "methods": {},
    }
    for meth in METHODS:
        per_cell_median = np.median(used[meth], axis=0)
        out["methods"][meth] = {
            "median_used_per_cell": per_cell_median.tolist(),
            "median_run_per_cell": np.median(run[meth], axis=0).tolist(),
            "median_cell_ratio": float(np.median(used[meth]) / N_FIXED),
            "median_cell_ratio_run": float(np.median(run[meth]) / N_FIXED),
            "median_grid_total_used": float(np.median(used[meth].sum(axis=1))),
            "median_grid_total_run": float(np.median(run[meth].sum(axis=1))),
            "grid_ratio_run": float(np.median(run[meth].sum(axis=1)) / (m * N_FIXED)),
            "same_decision_where_fixed_decides": agree[meth][0],
            "different_decision_where_fixed_decides": agree[meth][1],
            "inconclusive_where_fixed_decides": agree[meth][2],
        }
    return out


def zero_failure(p_star: float = 0.05, delta: float = 0.1) -> dict:
    x = np.zeros(N_FIXED, dtype=np.int8)
    res = {"fixed_n_optimum": zero_failure_episodes(p_star, delta)}
    for meth in METHODS:
        rule = make_rule(meth, p_star, delta, N_FIXED)
        dec, n_run = scheduled(rule, x)
        res[meth] = {"used": dec.episodes, "run": n_run, "decision": dec.decision}
    return res


REAL_POLICY = """
import numpy as np

def cartpole(obs):
    obs = np.asarray(obs)
    return (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)
"""
REAL_CONFIG = """
policy = "python:pol:cartpole"
env = "CartPole-v1"
episodes = {episodes}
seed = 0
max_steps = 200
batch_size = 16
[spec]
cost = 'info.get("cost", 0)'
budget = 0.0
p_star = 0.05
[envelope]
obs_noise = {{ kind = "gaussian", levels = [0.0, 0.1, 0.2] }}
obs_ranges = "estimate"
reference_policy = "random"
act_noise = {{ kind = "gaussian", levels = [0.0, 0.5, 1.0] }}
"""


def real_grid(episodes: int) -> dict:
    """Real CartPole episodes on a 3×3 noise grid: fixed N = ``episodes`` vs sequential (cap N)."""
    import tempfile

    from safecert.blackbox.backends import LocalBackend
    from safecert.blackbox.certify import certify
    from safecert.blackbox.sequential import certify_sequential

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "pol.py").write_text(REAL_POLICY)
        config = folder / "run.toml"
        config.write_text(REAL_CONFIG.format(episodes=episodes))
        t = time.time()
        fixed = certify(config, folder / "fixed", backend=LocalBackend(2), progress=False)
        t_fixed = time.time() - t
        t = time.time()
        seq = certify_sequential(config, folder / "seq", LocalBackend(2), False, False)
        t_seq = time.time() - t
    cells = []
    for f, s, d in zip(
        fixed.result.cells, seq.result.cells, seq.result.sequential.cells, strict=True
    ):
        cells.append(
            {
                "params": f.params,
                "fixed_rate": f.failure_rate,
                "fixed_decision": fixed_decision(
                    f.failures, f.episodes, fixed.result.delta_cell, 0.05
                ),
                "sequential_decision": s.decision,
                "episodes_used": d.episodes_used,
                "episodes_run": d.episodes_run,
            }
        )
    return {
        "episodes_fixed": episodes,
        "cells": cells,
        "seconds_fixed": t_fixed,
        "seconds_sequential": t_seq,
        "episodes_run_total": seq.result.sequential.episodes_run,
        "episodes_fixed_total": seq.result.sequential.episodes_fixed_n,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--real", type=int, default=0, help="also run real CartPole cells, fixed N = REAL"
    )
    args = ap.parse_args()
    t0 = time.time()
    report = {"n_fixed": N_FIXED, "p_star": 0.05, "confidence": 0.9, "grids": {}}
    for name, rates in GRIDS.items() if args.reps > 0 else ():
        report["grids"][name] = g = run_grid(name, rates, args.reps, 0.05, 0.1, args.seed)
        print(
            f"== {name}: rates {rates}; fixed N decides {g['fixed_decided_cells']} of "
            f"{args.reps * len(rates)} cells"
        )
        for meth, s in g["methods"].items():
            print(
                f"  {meth:<8} median episodes/cell {np.median(s['median_used_per_cell']):7.0f} "
                f"(ratio {s['median_cell_ratio']:.4f}, with rounds {s['median_cell_ratio_run']:.4f}); "
                f"grid total {s['median_grid_total_run']:.0f} of {9 * N_FIXED} "
                f"({s['grid_ratio_run']:.3f}); same/different/inconclusive where fixed decides "
                f"{s['same_decision_where_fixed_decides']}/{s['different_decision_where_fixed_decides']}/"
                f"{s['inconclusive_where_fixed_decides']}",
                flush=True,
            )
    report["zero_failure"] = zf = zero_failure()
    print("zero failures, p* = 0.05, 90 %:", json.dumps(zf))
    if args.real:
        report["real_cartpole"] = rc = real_grid(args.real)
        for c in rc["cells"]:
            print(
                f"  real {c['params']}: rate {c['fixed_rate']:.4f} fixed {c['fixed_decision']}, "
                f"sequential {c['sequential_decision']} after {c['episodes_used']} (run {c['episodes_run']})"
            )
        print(
            f"  real total: {rc['episodes_run_total']} of {rc['episodes_fixed_total']} episodes; "
            f"{rc['seconds_sequential']:.1f} s vs {rc['seconds_fixed']:.1f} s"
        )
    report["seconds"] = time.time() - t0
    OUT.mkdir(exist_ok=True)
    if args.reps > 0:
        (OUT / "sequential_grid.json").write_text(json.dumps(report, indent=2))
        _plot(report, OUT / "sequential_grid.png")
    else:  # --reps 0 --real N: only the real run
        (OUT / "sequential_grid_real.json").write_text(json.dumps(report, indent=2))


def _plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(report["grids"]), figsize=(13, 3.8))
    for ax, (name, g) in zip(axes, report["grids"].items(), strict=True):
        x = np.arange(len(g["rates"]))
        w = 0.2
        for i, meth in enumerate(METHODS):
            ax.bar(x + (i - 1.5) * w, g["methods"][meth]["median_run_per_cell"], w, label=meth)
        ax.axhline(N_FIXED, color="k", lw=1, ls="--", label="fixed N")
        ax.set_yscale("log")
        ax.set_xticks(x, [f"{p:.3f}" for p in g["rates"]], rotation=60, fontsize=7)
        ax.set_title(f"{name}: median episodes per cell")
        ax.set_xlabel("true failure rate of the cell")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
