"""Experiment (helper H1, issue 28.2): a lone run's loop on SafeHalfCheetahVelocity with the ONNX
policy in its policy worker, K copies in two halves, against the in-process loop and the hand
loop in the same process: CPU seconds of the rollout and of the policy worker (from /proc), the
time the rollout waited for replies, and whether the worker had a CPU of its own.

    .venv/bin/python benchmarks/_experiments/H1_lone.py EPISODES K [K ...]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import rollout_overhead as ro  # noqa: E402

from safecert.blackbox.config import RunConfig  # noqa: E402
from safecert.blackbox.jobs import EpisodeJob, episode_seed  # noqa: E402
from safecert.blackbox.oracles import lockstep_calls, make_oracle, parse_oracle_spec  # noqa: E402
from safecert.blackbox.rollout import make_base_env, run_lockstep  # noqa: E402
from safecert.isolation import colocated, cpu_seconds, has_own_cpu  # noqa: E402


def lone(episodes: int, k: int) -> dict:
    spec = ro.TASKS["cheetah"]
    config = RunConfig.model_validate({**spec, "episodes": episodes, "workers": 1, "lockstep": k})
    oracle = make_oracle(parse_oracle_spec(config.policy, base_dir=ro.REPO / "examples"))
    envs = [make_base_env(config, ro.REPO) for _ in range(k)]
    jobs = [EpisodeJob(0, i, episode_seed(0, 0, i)) for i in range(episodes)]
    waited = [0.0]
    try:
        oracle.probe()
        apart = oracle.channel
        with colocated(apart):
            own = has_own_cpu(apart)

            def post(obs, size):  # type: ignore[no-untyped-def]
                reply = oracle.post_calls(obs, size)

                def wait():  # type: ignore[no-untyped-def]
                    began = time.perf_counter()
                    try:
                        return reply()
                    finally:
                        waited[0] += time.perf_counter() - began

                return wait

            pid = apart.pid
            w0, c0, t0 = cpu_seconds(pid), time.process_time(), time.perf_counter()
            records = run_lockstep(
                envs, jobs, oracle.act, config, calls=lockstep_calls(oracle), post=post, ahead=own
            )
            steps = sum(r.steps for r in records)
            t1, c1, w1 = time.perf_counter(), time.process_time(), cpu_seconds(pid)
    finally:
        oracle.close()
    return {
        "k": k,
        "own_cpu": own,
        "steps": steps,
        "rollout_cpu_us_step": (c1 - c0) / steps * 1e6,
        "worker_cpu_us_step": (w1 - w0) / steps * 1e6,
        "waited_us_step": waited[0] / steps * 1e6,
        "wall_us_step": (t1 - t0) / steps * 1e6,
    }


def main() -> None:
    episodes, ks = int(sys.argv[1]), [int(k) for k in sys.argv[2:]]
    act = ro.hand_policy("cheetah")
    for _ in range(2):
        c0 = time.process_time()
        steps = ro.hand_loop("cheetah", episodes, act)
        print({"hand_cpu_us_step": (time.process_time() - c0) / steps * 1e6}, flush=True)
        _, _, cpu = ro.certify_loop("cheetah", episodes, 1, "in-process", 0)
        print({"in_process_cpu_us_step": cpu / steps * 1e6}, flush=True)
        for k in ks:
            print(lone(episodes, k), flush=True)


if __name__ == "__main__":
    main()
