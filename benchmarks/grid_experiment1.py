"""Experiment 1 (paper Sec. V-A): soundness on the 7×7 grid.

Synthesize a shield from M = 12,000 logged episodes with ε = 0.10, then run three controllers
through it, 4×10^4 episodes each: the adversary (worst admissible policy under the true kernel),
a competent goal-directed agent (forbidden proposal → halt) and a random agent restricted to the
permitted actions. Prints their unsafe rates beside the certificate and the exact worst case.

    .venv/bin/python benchmarks/grid_experiment1.py [--method greedy|additive|robust_q] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from _experiments.gridworld import (
    adversary,
    competent,
    grid_model,
    random_controller,
    rollout,
    simulate_logs,
    true_kernel,
)

from safecert.shield.reach import exact_rows, value_iteration
from safecert.shield.report import plot_grid
from safecert.shield.synthesis import synthesize


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=12_000)
    ap.add_argument("--epsilon", type=float, default=0.10)
    ap.add_argument("--rollouts", type=int, default=40_000)
    ap.add_argument("--method", default="greedy")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("runs/bench/shield"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    seeds = np.random.SeedSequence(args.seed).spawn(2)
    model = grid_model(args.episodes)
    probs = true_kernel(model)
    est, _ = simulate_logs(model, probs, args.episodes, np.random.default_rng(seeds[0]))
    # for comparison only (not a valid certificate: the budget would depend on the data): the
    # same log with every sample used, n0 = visits
    every, _ = simulate_logs(model, probs, args.episodes, np.random.default_rng(seeds[0]),
                             n0=np.maximum(est.visits, 1))  # fmt: skip
    assert (every.visits == est.visits).all()
    all_samples = synthesize(model, every, args.epsilon, method=args.method)
    t0 = time.perf_counter()
    res = synthesize(model, est, args.epsilon, method=args.method)
    seconds = time.perf_counter() - t0
    exact, _ = value_iteration(exact_rows(model, probs), res.allowed, model.horizon)
    rng = np.random.default_rng(seeds[1])
    controllers = {
        "adversary": adversary(model, probs, res.allowed),
        "competent": competent(model, probs, res.allowed),
        "random": random_controller(model, res.allowed, rng),
    }
    rates = {
        k: float(rollout(model, probs, c, args.rollouts, rng).mean())
        for k, c in controllers.items()
    }
    out = {
        "method": args.method,
        "M": args.episodes,
        "epsilon": args.epsilon,
        "certificate": res.bound,
        "exact_worst_case": float(exact[model.initial]),
        "unsafe_rates": rates,
        "rollouts": args.rollouts,
        "forbidden_fraction": res.forbidden_fraction,
        "forbidden_fraction_all_samples": all_samples.forbidden_fraction,
        "goal_reachable": res.goal_reachable,
        "missed_budget": est.missed_budget,
        "synthesis_seconds": seconds,
    }
    (args.out / f"experiment1_{args.method}.json").write_text(json.dumps(out, indent=2))
    plot_grid(model, res.allowed, res.values, args.out / f"experiment1_{args.method}.png",
              f"{args.method}: V̄_T(s0) = {res.bound:.3f}, exact {exact[model.initial]:.3f}")  # fmt: skip
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
