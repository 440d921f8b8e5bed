"""Experiment 4 / Table V: the Markov diagnostic on the grid and the sandbox, and its failure mode.

* grid: SH-engine's 7×7 grid with its near-even logging protocol (M = 12,000);
* sandbox: development logs of a uniform explorer (M = 4,000) on the sandbox's true kernel, with
  the full abstraction and with the predicate ``confirmed`` deleted (the coarse abstraction is
  not Markov: whether a write in production is harm or the goal depends on the hidden approval);
* both contexts of Table V: previous state, previous state + action;
* calibration: over ``--datasets`` independent sandbox datasets, how often the exactly-Markov
  abstraction shows any rejection (false alarm) and how often the coarse one does (power).

    .venv/bin/python benchmarks/experiment4_markov.py [--datasets 100] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
from _experiments import gridworld
from _experiments import sandbox_experiments as sx
from rich.console import Console
from rich.progress import Progress

from safecert.shield import sandbox_model as sm
from safecert.shield.diagnostics import diagnose
from safecert.shield.logs import Step

PAPER = {
    "grid": {"testable": 160, "rejected": 0, "eta_hat": 0.14, "eta_null": 0.17},
    "sandbox": {"testable": 15, "rejected": 0, "eta_hat": 0.08, "eta_null": 0.20},
    "sandbox without confirmed": {"testable": 7, "rejected": 4, "eta_hat": 0.18},
    "coarse, state+action context": {"eta_hat": 0.630, "note": "rejections halved"},
}


def grid_steps(episodes: int, seed: int):
    model = gridworld.grid_model(episodes)
    records: list[tuple] = []
    gridworld.simulate_logs(model, gridworld.true_kernel(model), episodes,
                            np.random.default_rng(seed), sink=records.extend)  # fmt: skip
    steps = [Step(f"e{e}", t, s, a, s2, model.successor_position(s, a, s2), i)
             for i, (e, t, s, a, s2) in enumerate(records)]  # fmt: skip
    return model, steps


def sandbox_steps(episodes: int, seed: int, coarse: bool):
    steps = sm.simulate(sm.true_kernel(), sx.explore_policy(), episodes, 10,
                        np.random.default_rng(seed))  # fmt: skip
    if not coarse:
        return sm.load(), steps
    model, f2c = sx.coarsened("confirmed")
    steps = steps.copy()
    steps[:, 2], steps[:, 4] = f2c[steps[:, 2]], f2c[steps[:, 4]]
    return model, steps


def summary(d) -> dict:
    return {"testable": d.testable, "rejected": d.rejected, "eta_hat": d.eta_hat,
            "eta_null": d.eta_null}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--datasets", type=int, default=100)
    ap.add_argument("--grid-episodes", type=int, default=12_000)
    ap.add_argument("--permutations", type=int, default=200)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    table = {}
    gm, gsteps = grid_steps(args.grid_episodes, 0)
    for ctx in ("state", "state_action"):
        table[f"grid / {ctx}"] = summary(
            diagnose(gm, iter(gsteps), context=ctx, permutations=args.permutations, rng=rng)
        )
        for name, coarse in (("sandbox", False), ("sandbox without confirmed", True)):
            model, steps = sandbox_steps(4000, 0, coarse)
            table[f"{name} / {ctx}"] = summary(
                diagnose(model, sm.as_steps(model, steps), context=ctx,
                         permutations=args.permutations, rng=rng))  # fmt: skip
    alarms = {"sandbox": 0, "sandbox without confirmed": 0}
    with Progress(transient=True, console=Console(stderr=True), disable=args.json) as bar:
        task = bar.add_task("datasets", total=args.datasets)
        for seed in range(1, args.datasets + 1):
            for name, coarse in (("sandbox", False), ("sandbox without confirmed", True)):
                model, steps = sandbox_steps(4000, seed, coarse)
                d = diagnose(model, sm.as_steps(model, steps), permutations=0)
                alarms[name] += d.rejected > 0
            bar.advance(task)
    result = {
        "table": table,
        "datasets": args.datasets,
        "any_rejection_rate": {k: v / args.datasets for k, v in alarms.items()},
        "paper": PAPER,
    }
    if args.json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
        return 0
    for name, row in table.items():
        print(f"{name:42s} testable {row['testable']:4d}  rejected {row['rejected']:3d}  "
              f"η̂ {row['eta_hat']:.3f}  null {row['eta_null']:.3f}")  # fmt: skip
    for k, v in result["any_rejection_rate"].items():
        print(f"datasets with any rejection, {k}: {v:.3f} (of {args.datasets})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
