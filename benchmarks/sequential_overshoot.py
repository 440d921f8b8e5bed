"""Episodes run past the decision, ``certify --sequential`` before and after issue 28.1.

The held-out-like task: one cell whose episodes fail with probability p = 0.02 (a one-step
environment, ``coin``: cost 1 with probability p, ``--episode-ms`` per episode, default 5), p* = 0.05, confidence 0.9
(δ = 0.1, M = 1), rule ``onesided``, cap 5000. For each of 25 seeds, in this process, on real
worker processes (the same ``LocalBackend``):

- **before** (baseline): the scheduler this project shipped until issue 28 — rounds ending at
  ``round_target`` (min_round 8, growth 1.25, first chance to PASS), each round's jobs run to the
  end through ``LocalBackend.run`` (chunks of max(8, 4·batch), two per worker), the decision
  taken on the stored prefix after each round; overshoot = episodes stored − decision point;
- **after**: :func:`safecert.blackbox.sequential.certify_sequential` (a decision on each
  completed episode, a window of workers × batch_size); overshoot = episodes handed out at or
  after the decision point (the store's ``sequential_overshoot`` meta).

Both read the same outcomes (seeded per episode), so the decision point is the same; the check
"same decision point" asserts it. Wall times are whole runs (preflight included) on a shared
machine: noisy.

    .venv/bin/python benchmarks/sequential_overshoot.py [--seeds 25] [--workers 1 2] [--batch 1]
        [--episode-ms 5]

Writes ``benchmarks/out/sequential_overshoot_<episode-ms>ms.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

from safecert.blackbox.backends import LocalBackend
from safecert.blackbox.certify import make_context, open_store, run_jobs
from safecert.blackbox.jobs import make_jobs
from safecert.blackbox.plan import plan_run
from safecert.blackbox.sequential import (
    build_rule,
    certify_sequential,
    outcomes_prefix,
    sequential_result,
    sequential_settings,
)
from safecert.blackbox.store import EpisodeStore
from safecert.stats.sequential import UNDECIDED, Boundaries

OUT = Path(__file__).resolve().parent / "out"
COIN = """
import time

import gymnasium as gym
import numpy as np


class Coin(gym.Env):
    observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float64)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, p=0.02, sleep_s=0.0):
        self.p, self.sleep_s = p, sleep_s

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.u = self.np_random.random()
        return np.zeros(1), {}

    def step(self, action):
        time.sleep(self.sleep_s)
        return np.zeros(1), 0.0, False, True, {"cost": float(self.u < self.p)}


def policy(obs):
    return np.zeros(len(obs), dtype=np.int64)
"""
CONFIG = """
policy = "python:coin:policy"
env = "python:coin:Coin"
env_kwargs = {{ p = 0.02, sleep_s = {sleep_s} }}
trust = "in-process"
episodes = 5000
seed = {seed}
max_steps = 1
batch_size = {batch}
[spec]
budget = 0.5
p_star = 0.05
confidence = 0.9
cost = "info:cost"
[envelope]
"""


# --- the baseline: the round scheduler of safecert before issue 28 (verbatim logic) ---
MIN_ROUND, ROUND_GROWTH = 8, 1.25


def _earliest_stop(rule, episodes: int, failures: int, *, pass_only: bool = False) -> int:
    if not isinstance(rule, Boundaries):
        return min(rule.cap, episodes + 1)
    later = rule.checks > episodes
    n = rule.checks[later]
    possible = failures <= rule.pass_max[later]
    if not (pass_only and possible.any()):
        possible = possible | (failures + (n - episodes) >= rule.fail_min[later])
    return int(n[np.argmax(possible)]) if possible.any() else rule.cap


def _round_target(rule, episodes: int, failures: int) -> int:
    grown = max(episodes + MIN_ROUND, math.ceil(episodes * ROUND_GROWTH))
    pass_only = failures == 0 and episodes >= MIN_ROUND
    return min(rule.cap, max(_earliest_stop(rule, episodes, failures, pass_only=pass_only), grown))


def before(config: Path, out: Path, workers: int) -> dict:
    """The pre-issue-28 run loop of certify_sequential (one cell), on the real backend."""
    t0 = time.perf_counter()
    plan = plan_run(config)
    rule = build_rule(plan.config, plan.family, sequential_settings(plan.config))
    budget = plan.config.spec.budget
    with LocalBackend(workers) as backend, open_store(plan, out, resume=False) as store:
        ctx = make_context(plan, store)
        while True:
            x = outcomes_prefix(store.records(0), budget)
            n = x.size
            if rule.decide(x).decision != UNDECIDED:
                break
            target = _round_target(rule, n, int(x.sum()))
            run_jobs(backend, make_jobs(plan.config.seed, 0, target, store.done()), ctx, store)
        tau = rule.decide(x).episodes
        sequential_result(  # the same judgement as after's, for comparable wall times
            plan.config,
            plan.family,
            store,
            cost_range=plan.cost_range,
            return_range=plan.return_range,
        )
        return {"tau": tau, "overshoot": store.count() - tau, "wall_s": time.perf_counter() - t0}


def after(config: Path, out: Path, workers: int) -> dict:
    t0 = time.perf_counter()
    cert = certify_sequential(config, out, LocalBackend(workers), False, False)
    with EpisodeStore(out / "episodes.sqlite", create=False) as store:
        meta = store.get_meta("sequential_overshoot")["0"]
        assert store.count() == cert.result.sequential.cells[0].episodes_used
    return {
        "tau": cert.result.sequential.cells[0].episodes_used,
        "overshoot": meta["overshoot"],
        "in_flight_bound": meta["in_flight_bound"],
        "decision": cert.verdict,
        "wall_s": time.perf_counter() - t0,
    }


def summary(values: list[float]) -> dict:
    a = np.asarray(values, dtype=float)
    return {"mean": float(a.mean()), "median": float(np.median(a)), "max": float(a.max())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=25)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--episode-ms", type=float, default=5.0, help="cost of one episode")
    args = parser.parse_args()
    results: dict = {
        "seeds": args.seeds,
        "batch_size": args.batch,
        "episode_ms": args.episode_ms,
        "runs": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "coin.py").write_text(COIN)
        for workers in args.workers:
            rows = []
            for seed in range(args.seeds):
                config = folder / f"run{seed}.toml"
                config.write_text(
                    textwrap.dedent(
                        CONFIG.format(seed=seed, batch=args.batch, sleep_s=args.episode_ms / 1e3)
                    )
                )
                b = before(config, folder / f"b{workers}_{seed}", workers)
                a = after(config, folder / f"a{workers}_{seed}", workers)
                assert a["tau"] == b["tau"], (seed, a, b)  # same outcomes, same decision point
                rows.append({"seed": seed, "before": b, "after": a})
                print(workers, seed, b["tau"], b["overshoot"], a["overshoot"], flush=True)
            results["runs"][str(workers)] = {
                "rows": rows,
                "tau": summary([r["after"]["tau"] for r in rows]),
                "overshoot_before": summary([r["before"]["overshoot"] for r in rows]),
                "overshoot_after": summary([r["after"]["overshoot"] for r in rows]),
                "wall_before_s": float(sum(r["before"]["wall_s"] for r in rows)),
                "wall_after_s": float(sum(r["after"]["wall_s"] for r in rows)),
                "in_flight_bound": workers * args.batch,
            }
    OUT.mkdir(exist_ok=True)
    name = f"sequential_overshoot_{args.episode_ms:g}ms.json"
    (OUT / name).write_text(json.dumps(results, indent=1))
    for workers, r in results["runs"].items():
        print(
            f"workers {workers}: decision point median {r['tau']['median']:.0f}; overshoot "
            f"before mean {r['overshoot_before']['mean']:.1f} (max {r['overshoot_before']['max']:.0f}),"
            f" after mean {r['overshoot_after']['mean']:.2f} (max {r['overshoot_after']['max']:.0f},"
            f" bound {r['in_flight_bound']}); wall {r['wall_before_s']:.1f} s -> "
            f"{r['wall_after_s']:.1f} s"
        )


if __name__ == "__main__":
    main()
