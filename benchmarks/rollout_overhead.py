"""Per-step cost of certify's rollout loop: ``run_lockstep`` with the real oracle (reply checks,
action-space check, spec cost) beside a hand-written Gymnasium loop on the same task, policy and
seeds, in this one process — no start-up, no store, no report. Best (minimum) of ``--repeat``
interleaved runs, so load changes hit both sides. ``--trust`` sets how the policy (a ``python:``
policy or the ONNX model) runs: ``in-process``, or ``isolated``: in a policy worker process, one
pipe round trip per step, with the rollout and the worker on one CPU as certify's pool workers
run them; or ``lone``: isolated as the only worker of a run runs it, the policy worker on a CPU
of its own when one is free, answering one half of the copies while the rollout steps the other
half; the halves in turn on one CPU without a CPU free. ``--lockstep`` K: the rollout steps
K × batch episodes together, one policy call per ``batch`` rows, a step's calls in one round
trip to a policy worker (``lockstep`` of the run config; 0 = its default: 16 for a policy
worker, 64 for ``lone`` with a ``python:`` policy and 16 with an ONNX model, 1 otherwise).

    .venv/bin/python benchmarks/rollout_overhead.py --episodes 60 --repeat 7 --batch 1,8
    .venv/bin/python benchmarks/rollout_overhead.py --tasks cartpole --trust in-process,isolated
    .venv/bin/python benchmarks/rollout_overhead.py --tasks cartpole --trust isolated --batch 1 \
        --lockstep 1,4,16,32
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np

import safecert.envs  # noqa: F401  (registers the built-in tasks)
from safecert.blackbox.backends import RunContext, lockstep
from safecert.blackbox.config import RunConfig
from safecert.blackbox.jobs import EpisodeJob, episode_seed
from safecert.blackbox.oracles import lockstep_calls, make_oracle, parse_oracle_spec
from safecert.blackbox.rollout import make_base_env, run_lockstep
from safecert.isolation import colocated, has_own_cpu

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "examples" / "vendors" / "cheetah_safe.onnx"

TASKS = {
    "cartpole": {
        "policy": "python:vendors.cartpole_policies:balance",
        "env": "SafeCartPole-v0",
        "env_kwargs": {},
        "max_steps": 500,
        "spec": {"budget": 1000.0, "goal": "no_termination", "cost": "info:cost"},
    },
    "point": {
        "policy": "python:vendors.point_policies:hazard_avoider",
        "env": "SafePointGoal-v0",
        "env_kwargs": {"layout_seed": 0},
        "max_steps": 200,
        "spec": {"budget": 1000.0, "goal": "steps >= 0", "cost": "info:cost"},
    },
    "cheetah": {
        "policy": f"onnx:{MODEL}",
        "env": "SafeHalfCheetahVelocity-v0",
        "env_kwargs": {},
        "max_steps": 250,
        "spec": {"budget": 5.0, "goal": "no_termination", "cost": "info:cost"},
    },
}


def hand_policy(task: str) -> Callable[[np.ndarray], np.ndarray]:
    """What a person would call: the bare function, or the bare ONNX session on float32."""
    if task in ("point", "cartpole"):
        sys.path.insert(0, str(REPO / "examples"))
        from vendors.cartpole_policies import balance
        from vendors.point_policies import hazard_avoider

        fn = hazard_avoider if task == "point" else balance
        return lambda obs: fn(np.asarray(obs)[None])[0]
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(MODEL), options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return lambda obs: session.run(None, {name: np.asarray(obs, dtype=np.float32)[None]})[0][0]


def hand_loop(task: str, episodes: int, act: Callable[[np.ndarray], np.ndarray]) -> int:
    spec = TASKS[task]
    env = gym.make(spec["env"], **spec["env_kwargs"])
    steps = 0
    for i in range(episodes):
        obs, _ = env.reset(seed=episode_seed(0, 0, i))
        for _ in range(spec["max_steps"]):
            obs, _r, term, trunc, _info = env.step(act(obs))
            steps += 1
            if term or trunc:
                break
    return steps


def certify_loop(
    task: str, episodes: int, batch: int, trust: str, k: int
) -> tuple[int, float, float]:
    """(steps, wall seconds, CPU seconds of this process) of certify's loop alone on
    ``episodes`` episodes (an isolated policy's worker process is not in the CPU seconds)."""
    spec = TASKS[task]
    config = RunConfig.model_validate(
        {
            **spec,
            "episodes": episodes,
            "seed": 0,
            "workers": 1,
            "batch_size": batch,
            "lockstep": k or None,
        }
    )
    lone = trust == "lone"
    oracle_spec = parse_oracle_spec(
        config.policy, base_dir=REPO / "examples", trust="isolated" if lone else trust
    )
    oracle = make_oracle(oracle_spec)
    ctx = RunContext(config, str(REPO), ({},), None, oracle_spec)
    copies = batch * lockstep(ctx, alone=lone)
    envs = [make_base_env(config, REPO) for _ in range(min(copies, episodes))]
    jobs = [EpisodeJob(0, i, episode_seed(0, 0, i)) for i in range(episodes)]
    apart = getattr(oracle, "channel", None) if lone else None
    try:
        oracle.probe()  # a worker's start-up is not per-step work
        with colocated(apart):
            post = getattr(oracle, "post_calls", None) if lone and copies >= 2 else None
            ahead = apart is not None and has_own_cpu(apart)
            start, cpu = time.perf_counter(), time.process_time()
            records = run_lockstep(
                envs,
                jobs,
                oracle.act,
                config,
                calls=lockstep_calls(oracle),
                post=post,
                ahead=ahead,
            )
            steps = sum(r.steps for r in records)
            return steps, time.perf_counter() - start, time.process_time() - cpu
    finally:
        oracle.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--tasks", default="cartpole,point,cheetah")
    parser.add_argument("--batch", default="1,8", help="comma-separated batch_size values")
    parser.add_argument("--trust", default="in-process", help="in-process and/or isolated")
    parser.add_argument("--lockstep", default="0", help="comma-separated K values (0: default)")
    args = parser.parse_args()
    variants = [
        (trust, int(b), int(k))
        for trust in args.trust.split(",")
        for b in args.batch.split(",")
        for k in args.lockstep.split(",")
    ]
    result: dict[str, object] = {"load_average_1min": os.getloadavg()[0]}
    for task in args.tasks.split(","):
        act = hand_policy(task)
        hand: list[float] = []
        hand_cpu: list[float] = []
        mine: dict[tuple[str, int, int], list[float]] = {v: [] for v in variants}
        mine_cpu: dict[tuple[str, int, int], list[float]] = {v: [] for v in variants}
        steps: dict[object, int] = {}
        for _ in range(args.repeat):
            start, cpu = time.perf_counter(), time.process_time()
            steps["hand"] = hand_loop(task, args.episodes, act)
            hand.append(time.perf_counter() - start)
            hand_cpu.append(time.process_time() - cpu)
            for trust, b, k in variants:
                steps[trust, b, k], seconds, cpu_s = certify_loop(task, args.episodes, b, trust, k)
                mine[trust, b, k].append(seconds)
                mine_cpu[trust, b, k].append(cpu_s)
        if len(set(steps.values())) != 1:
            raise SystemExit(f"{task}: the loops ran different episodes: {steps}")
        h, hc = min(hand), min(hand_cpu)
        row: dict[str, object] = {"steps": steps["hand"], "hand_s": h, "hand_cpu_s": hc}
        for trust, b, k in variants:
            m, mc = min(mine[trust, b, k]), min(mine_cpu[trust, b, k])
            row[f"{trust}_batch_{b}_lockstep_{k or 'default'}"] = {
                "certify_loop_s": m,
                "ratio": m / h,
                "extra_us_per_step": (m - h) / steps["hand"] * 1e6,
                "certify_loop_cpu_s": mc,
                "cpu_ratio": mc / hc,
                "extra_cpu_us_per_step": (mc - hc) / steps["hand"] * 1e6,
            }
        result[task] = row
        print(task, json.dumps(row), file=sys.stderr, flush=True)
    result["load_average_1min_after"] = os.getloadavg()[0]
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
