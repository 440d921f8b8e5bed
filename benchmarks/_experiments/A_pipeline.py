"""Experiment (helper A, issue 28.2): the isolated rollout loop with a step's calls posted while
the other half of the copies is stepped (``post:K``: the policy worker on a CPU of its own, as a
lone run gets it), against the one-round-trip-a-step loop on one CPU (``calls:K``) and the hand
loop, in one process. Prints, per variant, [wall ratio, rollout CPU ratio, policy worker CPU
ratio] against the hand loop (best of the repeats).

    .venv/bin/python benchmarks/_experiments/A_pipeline.py EPISODES REPEAT calls:16,post:16,post:32
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import rollout_overhead as ro  # noqa: E402

from safecert.blackbox.config import RunConfig  # noqa: E402
from safecert.blackbox.jobs import EpisodeJob, episode_seed  # noqa: E402
from safecert.blackbox.oracles import lockstep_calls, make_oracle, parse_oracle_spec  # noqa: E402
from safecert.blackbox.rollout import make_base_env, run_lockstep  # noqa: E402
from safecert.isolation import colocated, has_own_cpu  # noqa: E402


def worker_cpu(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def loop(episodes: int, k: int, mode: str) -> tuple[float, float, float]:
    spec = ro.TASKS["cartpole"]
    config = RunConfig.model_validate(
        {**spec, "episodes": episodes, "seed": 0, "workers": 1, "batch_size": 1, "lockstep": k}
    )
    oracle_spec = parse_oracle_spec(config.policy, base_dir=ro.REPO / "examples")
    oracle = make_oracle(oracle_spec)
    envs = [make_base_env(config, ro.REPO) for _ in range(k)]
    jobs = [EpisodeJob(0, i, episode_seed(0, 0, i)) for i in range(episodes)]
    try:
        oracle.probe()
        apart = oracle.channel if mode == "post" else None  # type: ignore[attr-defined]
        with colocated(apart):
            pid = oracle.channel.pid  # type: ignore[attr-defined]
            post = oracle.post_calls if apart is not None and has_own_cpu(apart) else None  # type: ignore[attr-defined]
            if mode == "post" and post is None:
                raise SystemExit("no CPU free for the policy worker")
            w0 = worker_cpu(pid)
            start, cpu = time.perf_counter(), time.process_time()
            records = run_lockstep(
                envs, jobs, oracle.act, config, calls=lockstep_calls(oracle), post=post
            )
            steps = sum(r.steps for r in records)
            assert steps == episodes * 500, steps
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu
            return wall, cpu, worker_cpu(pid) - w0
    finally:
        oracle.close()


def main() -> None:
    episodes, repeat = int(sys.argv[1]), int(sys.argv[2])
    variants = sys.argv[3].split(",")  # e.g. calls:16,post:16,post:32
    act = ro.hand_policy("cartpole")
    hand, hand_cpu, mine = [], [], {v: [] for v in variants}
    load = os.getloadavg()[0]
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        ro.hand_loop("cartpole", episodes, act)
        hand.append(time.perf_counter() - t0)
        hand_cpu.append(time.process_time() - c0)
        for v in variants:
            mode, k = v.split(":")
            mine[v].append(loop(episodes, int(k), mode))
    h, hc = min(hand), min(hand_cpu)
    out = {"load": [load, os.getloadavg()[0]], "hand_s": h, "hand_cpu_s": hc}
    for v, runs in mine.items():  # wall ratio; rollout CPU ratio; policy worker CPU ratio
        out[v] = [round(min(r[i] for r in runs) / (h if i == 0 else hc), 3) for i in range(3)]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
