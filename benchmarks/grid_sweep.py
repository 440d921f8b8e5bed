"""Certificate vs number of logged episodes M (paper Sec. V-A, after Experiment 1).

The shield is synthesized once (M0 = 12,000, ε = 0.10, as in Experiment 1); its certificate is then
recomputed from fresh logs of M episodes, with the committed budget n0 = ⌊0.7·M·T/R⌋ for each M.
Fits the log–log slope of V̄_T(s0) against M (paper: 0.189 → 0.023 from 3×10^3 to 1.2×10^5, slope
−0.70) and counts rows short of their budget at M = 2,500 (paper: 1.5 of 200 on average).

    .venv/bin/python benchmarks/grid_sweep.py [--method greedy] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from _experiments.gridworld import grid_model, simulate_logs, true_kernel
from rich.progress import track

from safecert.shield.reach import robust_rows, value_iteration
from safecert.shield.synthesis import synthesize

SIZES = (3_000, 6_000, 12_000, 24_000, 48_000, 120_000)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--method", default="greedy")
    ap.add_argument("--repeats", type=int, default=3, help="datasets per M (mean reported)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("runs/bench/shield"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    seeds = np.random.SeedSequence(args.seed).spawn(3)
    base = grid_model(12_000)
    probs = true_kernel(base)
    est, _ = simulate_logs(base, probs, 12_000, np.random.default_rng(seeds[0]))
    shield = synthesize(base, est, 0.10, method=args.method)
    rng = np.random.default_rng(seeds[1])
    sweep = []
    for m in track(SIZES, description="sweep M"):
        model = grid_model(m)
        bounds, missed = [], []
        for _ in range(args.repeats):
            e, _ = simulate_logs(model, probs, m, rng)
            v, _ = value_iteration(robust_rows(model, e), shield.allowed, model.horizon)
            bounds.append(float(v[model.initial]))
            missed.append(e.missed_budget)
        sweep.append({"M": m, "n0": int(model.n0.max()), "bound": float(np.mean(bounds)),
                      "bounds": bounds, "missed_budget": float(np.mean(missed))})  # fmt: skip
    x, y = np.log([r["M"] for r in sweep]), np.log([r["bound"] for r in sweep])
    slope = float(np.polyfit(x, y, 1)[0])
    model = grid_model(2_500)
    rng2 = np.random.default_rng(seeds[2])
    miss = [simulate_logs(model, probs, 2_500, rng2)[0].missed_budget for _ in range(20)]
    out = {
        "method": args.method,
        "shield_bound_at_12000": shield.bound,
        "forbidden_fraction": shield.forbidden_fraction,
        "sweep": sweep,
        "loglog_slope": slope,
        "missed_budget_at_2500": {"mean": float(np.mean(miss)), "of_rows": model.stochastic_rows},
    }
    (args.out / f"sweep_{args.method}.json").write_text(json.dumps(out, indent=2))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.loglog(
        [r["M"] for r in sweep],
        [r["bound"] for r in sweep],
        "o-",
        label=f"ours (slope {slope:.2f})",
    )
    ax.loglog([3_000, 120_000], [0.189, 0.023], "s--", label="paper (slope −0.70)")
    ax.set_xlabel("logged episodes M")
    ax.set_ylabel("certificate V̄_T(s0)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out / f"sweep_{args.method}.png", dpi=120)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
