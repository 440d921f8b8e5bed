"""Table III: five shields built from the same sandbox logs, averaged over seeds.

Each seed draws M = 4,000 competent episodes on the sandbox's true kernel, builds our certified
shield (SH-engine's synthesis: the paper's robust-Q variant and the additive variant), plug-in,
policy-specific (Clopper–Pearson on the logged episodes), count-threshold (< 10) and Bayesian
Dirichlet shields (ε = 0.05, δ = 0.05, n0 = 4,000), and evaluates each *exactly* on the true
kernel: the certified bound, the worst admissible adversary's unsafe probability (exact VI), the
scripted agent's success probability with halt substitution, the % of the 96 live pairs
forbidden, the intervention rate (blocked proposals per executed call) and the mean length.

    .venv/bin/python benchmarks/table3_sandbox.py                 # 200 seeds (paper)
    .venv/bin/python benchmarks/table3_sandbox.py --quick --json  # 5 seeds, JSON on stdout
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from _experiments.sandbox_experiments import table3_rows
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

COLUMNS = [
    "bound",
    "adversary_unsafe",
    "success",
    "forbidden_pct",
    "intervention_rate",
    "mean_length",
]
PAPER = {"ours": 4.2, "count<10": 80.2, "dirichlet": 8.3}  # % of live pairs forbidden (paper)


def run(seeds: int, episodes: int, epsilon: float, progress: bool) -> dict:
    per_seed: list[list[dict]] = []
    t0 = time.perf_counter()
    with Progress(transient=True, disable=not progress, console=Console(stderr=True)) as bar:
        task = bar.add_task("seeds", total=seeds)
        for seed in range(seeds):
            per_seed.append(table3_rows(seed, episodes=episodes, epsilon=epsilon))
            bar.advance(task)
    names = [r["name"] for r in per_seed[0]]
    shields = []
    for i, name in enumerate(names):
        rows = [seed_rows[i] for seed_rows in per_seed]
        out = {"name": name}
        for col in COLUMNS:
            vals = [r[col] for r in rows if r[col] is not None]
            out[col] = float(np.mean(vals)) if vals else None
        out["adversary_harm_seeds"] = sum(r["adversary_unsafe"] > 0 for r in rows)
        out["bound_violated_seeds"] = sum(
            r["bound"] is not None and r["adversary_unsafe"] > r["bound"] + 1e-12 for r in rows
        )
        shields.append(out)
    return {
        "seeds": seeds,
        "episodes": episodes,
        "epsilon": epsilon,
        "seconds": time.perf_counter() - t0,
        "shields": shields,
        "paper_forbidden_pct": PAPER,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--episodes", type=int, default=4000)
    ap.add_argument("--epsilon", type=float, default=0.05)
    ap.add_argument("--quick", action="store_true", help="5 seeds")
    ap.add_argument("--json", action="store_true", help="print JSON only")
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    args = ap.parse_args(argv)
    seeds = 5 if args.quick else args.seeds
    result = run(seeds, args.episodes, args.epsilon, progress=not args.json)
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    if args.json:
        sys.stdout.write(text + "\n")
        return 0
    tab = Table(title=f"Table III — sandbox, M={args.episodes}, ε={args.epsilon}, {seeds} seeds")
    for col in ["shield", *COLUMNS, "adv. harm seeds"]:
        tab.add_column(col, justify="left" if col == "shield" else "right")
    for sh in result["shields"]:
        cells = ["—" if sh[c] is None else f"{sh[c]:.4f}" for c in COLUMNS]
        tab.add_row(sh["name"], *cells, f"{sh['adversary_harm_seeds']}/{seeds}")
    Console(width=160).print(tab)
    print(f"{result['seconds']:.1f} s; paper (% forbidden): {PAPER}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
