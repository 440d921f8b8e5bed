"""Spec expressions and observation ranges (issue 12): cost of evaluating the spec, and what Δ_s
each way of fixing it gives two vendors.

1. **Speed.** The same episodes (same seeds) of ``SafePointGoal-v0`` — a cheap simulator, so the
   spec's share shows — run by :func:`safecert.blackbox.rollout.run_lockstep` in this process with
   ``cost = "info:cost"`` (the shorthand), ``info.get("cost", 0)``, and a longer expression on the
   observation; the baseline is a plain Gymnasium loop with the same policy that sums
   ``info["cost"]`` by hand. Ratios are wall time / baseline. Each shorthand run must give the
   baseline's per-episode costs exactly (checked).
2. **Ranges.** CartPole's unbounded velocity dimensions: Δ_s estimated from each vendor's own
   rollouts (the old behaviour, reproduced by passing the vendor as the reference), from the
   fixed ``"random"`` reference, and declared.

    .venv/bin/python benchmarks/spec_expressions.py [--episodes 64] [--repeats 3]

Writes ``benchmarks/out/spec_expressions.json``; figures go to ``benchmarks/RESULTS_spec.md``.
The machine is shared: timings are noisy (the best of ``--repeats`` is reported).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

from safecert.blackbox.jobs import EpisodeJob, episode_seed
from safecert.blackbox.plan import plan_run
from safecert.blackbox.ranges import estimate_ranges, random_reference
from safecert.blackbox.rollout import build_cell_env, run_lockstep

OUT = Path(__file__).resolve().parent / "out"

POLICY = """
import numpy as np

def greedy(obs):
    obs = np.asarray(obs)
    return np.clip(3.0 * obs[:, 4:6] - 1.0 * obs[:, 2:4], -1.0, 1.0)

def balance(obs):
    obs = np.asarray(obs)
    return (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)

def centred(obs):
    obs = np.asarray(obs)
    return (obs[:, 2] + 0.5 * obs[:, 3] + 0.05 * obs[:, 0] + 0.1 * obs[:, 1] > 0).astype(np.int64)
"""

COSTS = {
    "info:cost": "info:cost",
    "info.get": 'info.get("cost", 0)',
    "expression": 'info["cost"] + 0.01 * (action[0] ** 2 + action[1] ** 2) + (abs(obs[0]) > 1.9)',
}


def _config(folder: Path, cost: str, episodes: int) -> Path:
    (folder / "bench_pol.py").write_text(POLICY)
    path = folder / f"run_{abs(hash(cost))}.toml"
    path.write_text(
        textwrap.dedent(
            f"""
            policy = "python:bench_pol:greedy"
            env = "SafePointGoal-v0"
            episodes = {episodes}
            max_steps = 200
            [spec]
            cost = '{cost}'
            goal = "info:is_success"
            """
        )
    )
    return path


def _safecert(config: Path) -> tuple[float, list[float], int]:
    plan = plan_run(config)
    from safecert.blackbox.oracles import make_oracle

    oracle = make_oracle(plan.oracle)
    env = build_cell_env(plan.config, plan.base_dir, plan.cells[0], None, oracle.act)
    jobs = [
        EpisodeJob(0, i, episode_seed(plan.config.seed, 0, i)) for i in range(plan.config.episodes)
    ]
    start = time.perf_counter()
    records = list(run_lockstep([env], jobs, oracle.act, plan.config))
    elapsed = time.perf_counter() - start
    env.close()
    oracle.close()
    return elapsed, [r.cost for r in records], sum(r.steps for r in records)


def _baseline(config: Path) -> tuple[float, list[float]]:
    import importlib
    import sys

    from safecert.envs import make_env

    plan = plan_run(config)
    sys.path.insert(0, str(plan.base_dir))
    greedy = importlib.import_module("bench_pol").greedy
    env = make_env("SafePointGoal-v0", {}, plan.base_dir)
    costs = []
    start = time.perf_counter()
    for i in range(plan.config.episodes):
        obs, _ = env.reset(seed=episode_seed(plan.config.seed, 0, i))
        total = 0.0
        for _ in range(200):
            action = greedy(np.asarray(obs, dtype=np.float64)[None])[0]
            obs, _, terminated, truncated, info = env.step(action)
            total += float(info["cost"])
            if terminated or truncated:
                break
        costs.append(total)
    elapsed = time.perf_counter() - start
    env.close()
    return elapsed, costs


def speed(episodes: int, repeats: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        out: dict = {"episodes": episodes}
        base = min(_baseline(_config(folder, "info:cost", episodes))[0] for _ in range(repeats))
        _, base_costs = _baseline(_config(folder, "info:cost", episodes))
        out["baseline_s"] = base
        for name, cost in COSTS.items():
            runs = [_safecert(_config(folder, cost, episodes)) for _ in range(repeats)]
            best = min(r[0] for r in runs)
            costs, steps = runs[0][1], runs[0][2]
            if name != "expression":
                assert costs == base_costs, f"{name}: costs differ from the hand-written loop"
            out[name] = {
                "s": best,
                "ratio": best / base,
                "steps": steps,
                "us_per_step": 1e6 * best / steps,
            }
        return out


def ranges() -> dict:
    declared = [[-4.8, 4.8], [-3.0, 3.0], [-0.42, 0.42], [-3.5, 3.5]]
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "bench_pol.py").write_text(POLICY)
        config = folder / "cp.toml"
        config.write_text(
            'policy = "python:bench_pol:balance"\nenv = "CartPole-v1"\nepisodes = 10\n'
            'max_steps = 500\n[spec]\ncost = "0"\n[envelope]\nobs_noise = { levels = [0.0, 0.05] }\n'
            'obs_ranges = "estimate"\nreference_policy = "random"\n'
        )
        plan = plan_run(config)
        import importlib
        import sys

        sys.path.insert(0, str(folder))
        pol = importlib.import_module("bench_pol")
        for vendor in ("balance", "centred"):
            est = estimate_ranges(plan.config, folder, getattr(pol, vendor))
            out[f"own rollouts of {vendor}"] = [round(x, 4) for x in est["range"]]
        import gymnasium as gym

        space = gym.make("CartPole-v1").action_space
        est = estimate_ranges(plan.config, folder, random_reference(space, plan.config.seed))
        out["reference 'random' (both vendors)"] = [round(x, 4) for x in est["range"]]
        out["declared (both vendors)"] = [hi - lo for lo, hi in declared]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    result = {"speed": speed(args.episodes, args.repeats), "ranges": ranges()}
    OUT.mkdir(exist_ok=True)
    (OUT / "spec_expressions.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
