"""Episodes per second of a ``python:`` policy behind the trust boundary (a policy worker, a child
process speaking the exec protocol) against the same policy loaded into the rollout process
(``trust = "in-process"``, the path every ``python:`` policy took before), in this one process:
certify's own rollout worker (:class:`safecert.blackbox.backends.Worker`), same task, policy,
seeds and batch size, no start-up, store or report. Interleaved repeats, best of each, so load
changes hit both sides. Also checks that both sides give identical episode records.

    .venv/bin/python benchmarks/isolation_overhead.py --episodes 100 --repeat 5 --batch 1,8,32
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import safecert.envs  # noqa: F401  (registers the built-in tasks)
from safecert.blackbox.backends import RunContext, Worker
from safecert.blackbox.config import RunConfig
from safecert.blackbox.grid import Family
from safecert.blackbox.jobs import make_jobs
from safecert.blackbox.plan import oracle_spec

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"

TASKS = {
    "cartpole": {
        "policy": "python:vendors.cartpole_policies:balance",
        "env": "SafeCartPole-v0",
        "max_steps": 500,
        "spec": {"budget": 1000.0, "goal": "no_termination"},
    },
    "point": {
        "policy": "python:vendors.point_policies:hazard_avoider",
        "env": "SafePointGoal-v0",
        "env_kwargs": {"layout_seed": 0},
        "max_steps": 200,
        "spec": {"budget": 1000.0, "goal": "steps >= 0", "cost": "info:cost"},
    },
}


def episodes_per_s(task: str, trust: str, batch: int, episodes: int) -> tuple[float, list]:
    config = RunConfig.model_validate(
        {**TASKS[task], "episodes": episodes, "batch_size": batch, "trust": trust}
    )
    family = Family.of(config.envelope, config.spec.confidence)
    ctx = RunContext(config, str(EXAMPLES), family.cells, None, oracle_spec(config, EXAMPLES))
    worker = Worker(ctx)
    jobs = make_jobs(config.seed, 0, episodes, frozenset())
    try:
        worker.run(jobs[:batch])  # start-up (worker process, imports) is not per-episode work
        start = time.perf_counter()
        records = worker.run(jobs)
        elapsed = time.perf_counter() - start
    finally:
        worker.close()
    steps = sum(r.steps for r in records)
    return episodes / elapsed, [(r.index, r.ret, r.cost, r.steps) for r in records] + [steps]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--batch", default="1,8,32")
    parser.add_argument("--tasks", default="cartpole,point")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args(argv)
    rows = []
    for task in args.tasks.split(","):
        for batch in (int(b) for b in args.batch.split(",")):
            best = {"in-process": 0.0, "isolated": 0.0}
            outcomes = {}
            for rep in range(args.repeat):
                for trust in ("in-process", "isolated"):
                    rate, records = episodes_per_s(task, trust, batch, args.episodes)
                    best[trust] = max(best[trust], rate)
                    outcomes[trust] = records
                print(f"  {task} B={batch} repeat {rep + 1}/{args.repeat}", file=sys.stderr)
            same = outcomes["in-process"] == outcomes["isolated"]
            steps = outcomes["isolated"][-1]
            row = {
                "task": task,
                "batch_size": batch,
                "episodes": args.episodes,
                "steps": steps,
                "in_process_eps": round(best["in-process"], 1),
                "isolated_eps": round(best["isolated"], 1),
                "ratio": round(best["isolated"] / best["in-process"], 3),
                "identical_records": same,
            }
            rows.append(row)
            print(
                f"{task:9s} B={batch:<3d} {steps / args.episodes:6.0f} steps/ep  in-process "
                f"{row['in_process_eps']:8.1f} ep/s  isolated {row['isolated_eps']:8.1f} ep/s  "
                f"ratio {row['ratio']:.3f}  identical records: {same}"
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
