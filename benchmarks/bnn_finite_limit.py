"""Where the collision-avoidance rows of Table 1 must stop: the largest ε with any invariant.

The collision-avoidance system is finite (150 integer states, three actions), so
:func:`safecert.bnn.finite.analyse_finite` decides exactly, for each ε, which actions every state
can take under the weight box, the maximal positive invariant ``M``, and whether ``X0 ⊆ M``. Where
it is not, a trajectory from ``X0`` into ``X_u`` with concrete weights in the box at every step is
replayed in float64: no invariant exists at that ε for any learner or verifier, so a Table 1 row
cannot go above it. This script walks a fine ε grid for ``car`` and ``car_all`` and prints, per ε,
``|M|``, how many states of ``X0`` lie outside it, the witness, the MILPs solved and the CPU seconds.

    .venv/bin/python benchmarks/bnn_finite_limit.py                      # both policies, 0.1σ steps
    .venv/bin/python benchmarks/bnn_finite_limit.py --policies car --grid 1.2,1.3,1.4 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from safecert.bnn.config import bayesian_spec, load_policy_network
from safecert.bnn.finite import analyse_finite
from safecert.bnn.setup import benchmark_config
from safecert.bnn.spec import Epsilon
from safecert.bnn.system import build_system

GRID = tuple(round(0.1 * k, 1) for k in range(2, 31))


def limit_row(name: str, sigma: float) -> dict:
    """One (policy, ε) cell of the analysis."""
    cfg = benchmark_config(name)
    mean, _ = load_policy_network(cfg, None)
    bench = build_system(cfg.system, cfg.dynamics, cfg.sets)
    box = bayesian_spec(cfg, mean).box(mean, Epsilon(sigma, True))
    c0 = time.process_time()
    a = analyse_finite(bench, box)
    return {
        "policy": name,
        "sigma": sigma,
        "maximal_invariant_states": int(a.maximal.sum()),
        "states": len(a.states),
        "x0_outside": int(np.sum(~a.maximal[a.initial])),
        "x0_states": int(a.initial.sum()),
        "ties_only_actions": int(np.sum(a.admitted & ~a.replayed)),
        "witness": a.describe() if a.witness is not None else None,
        "milps": a.milps,
        "cpu_s": time.process_time() - c0,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--policies", default="car,car_all")
    ap.add_argument("--grid", default=",".join(f"{v:g}" for v in GRID), help="ε values in σ")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    rows = []
    for name in args.policies.split(","):
        largest = None
        for sigma in (float(v) for v in args.grid.split(",")):
            row = limit_row(name, sigma)
            rows.append(row)
            if row["x0_outside"] == 0:
                largest = sigma
            print(
                f"{name:8s} {sigma:4.1f}σ  |M| {row['maximal_invariant_states']:3d}/{row['states']}"
                f"  X0 outside M {row['x0_outside']}/{row['x0_states']}  {row['milps']} MILPs"
                f"  {row['cpu_s']:.2f} CPU-s" + (f"  — {row['witness']}" if row["witness"] else ""),
                flush=True,
            )
        print(f"{name}: largest ε on the grid with X0 ⊆ M: {largest}σ", flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
