"""Wall time of ``safecert certify`` vs a hand-written Gymnasium loop (same env, policy, seeds).

Goal (issue 3): single worker ≤ 1.10× the hand loop; 2 workers ≥ 1.8× faster than 1 worker.

Both sides run the same episodes: nominal cell, ``SafePointGoal-v0`` (layout 0), the scripted
``hazard_avoider`` vendor policy of ``examples/vendors/point_policies.py``, seeds from
``episode_seed(seed, 0, i)``. The hand loop calls the policy on ``obs[None]`` and steps the env
(what a person would write); ``safecert certify`` additionally validates every reply, writes
every episode to SQLite and renders the report. Each variant runs ``--repeat`` times; the best
(minimum) wall time is reported, as timings on a shared machine are noisy; the single-worker
comparison is also given in CPU seconds of this process (less sensitive to other load).

    .venv/bin/python benchmarks/bench_certify_overhead.py --episodes 400
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "examples"))

CONFIG = """
policy = "python:vendors.point_policies:hazard_avoider"
env = "SafePointGoal-v0"
env_kwargs = {{ layout_seed = 0 }}
episodes = {episodes}
seed = 0
max_steps = 200
batch_size = {batch_size}
[spec]
budget = 5.0
p_star = 0.10
goal = "info:is_success"
"""


def hand_loop(episodes: int) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, total cost) of the plain loop."""
    import gymnasium as gym
    from vendors.point_policies import hazard_avoider

    import safecert.envs  # noqa: F401
    from safecert.blackbox.jobs import episode_seed

    start, cpu = time.perf_counter(), time.process_time()
    env = gym.make("SafePointGoal-v0", layout_seed=0)
    total = 0.0
    for i in range(episodes):
        obs, _ = env.reset(seed=episode_seed(0, 0, i))
        for _ in range(200):
            action = hazard_avoider(np.asarray(obs, dtype=np.float64)[None])[0]
            obs, _, terminated, truncated, info = env.step(action)
            total += info["cost"]
            if terminated or truncated:
                break
    return time.perf_counter() - start, time.process_time() - cpu, total


def certify_run(episodes: int, workers: int, batch_size: int = 1) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds of this process, total cost) of ``certify``."""
    from safecert.blackbox.certify import certify

    folder = Path(tempfile.mkdtemp(prefix="bench_certify_"))
    config = REPO / "examples" / f".bench_{os.getpid()}_{batch_size}.toml"
    config.write_text(textwrap.dedent(CONFIG.format(episodes=episodes, batch_size=batch_size)))
    try:
        start, cpu = time.perf_counter(), time.process_time()
        cert = certify(config, folder / "out", workers=workers, progress=False)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    finally:
        config.unlink()
    return elapsed, cpu, cert.result.stage1.cost_kpi.mean * episodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    n = args.episodes
    best: dict[str, float] = {}
    best_cpu: dict[str, float] = {}
    costs = {}
    for _ in range(args.repeat):
        for name, fn in (
            ("hand_loop", lambda: hand_loop(n)),
            ("certify_1_worker", lambda: certify_run(n, 1)),
            ("certify_2_workers", lambda: certify_run(n, 2)),
        ):
            seconds, cpu, cost = fn()
            best[name] = min(best.get(name, np.inf), seconds)
            best_cpu[name] = min(best_cpu.get(name, np.inf), cpu)
            costs[name] = cost
    assert len({round(c, 6) for c in costs.values()}) == 1, f"runs disagree: {costs}"
    out = {
        "episodes": n,
        "cpu_count": os.cpu_count(),
        "load_average_1min": os.getloadavg()[0],
        "seconds": best,
        "single_worker_ratio": best["certify_1_worker"] / best["hand_loop"],
        "cpu_seconds": {k: v for k, v in best_cpu.items() if k != "certify_2_workers"},
        "single_worker_cpu_ratio": best_cpu["certify_1_worker"] / best_cpu["hand_loop"],
        "two_worker_speedup": best["certify_1_worker"] / best["certify_2_workers"],
        "same_total_cost": costs["hand_loop"],
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
