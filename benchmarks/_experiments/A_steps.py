"""Experiment (helper A, issue 28.2): one rollout loop, for instruction counts under Valgrind.

    valgrind --tool=callgrind --callgrind-out-file=OUT python A_steps.py TASK EPISODES MODE
MODE: hand | in-process | isolated | isolated-post (the rollout loop of rollout_overhead.py;
isolated-post: a step's calls posted per half of the copies, the policy worker on a CPU of its
own, as a lone run has it; isolated runs colocated). Per step: (Ir(2E) - Ir(E)) / extra steps."""

from __future__ import annotations

import sys
from contextlib import nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import rollout_overhead as ro  # noqa: E402

from safecert.blackbox.backends import RunContext, lockstep  # noqa: E402
from safecert.blackbox.config import RunConfig  # noqa: E402
from safecert.blackbox.jobs import EpisodeJob, episode_seed  # noqa: E402
from safecert.blackbox.oracles import lockstep_calls, make_oracle, parse_oracle_spec  # noqa: E402
from safecert.blackbox.rollout import make_base_env, run_lockstep  # noqa: E402
from safecert.isolation import colocated, has_own_cpu  # noqa: E402


def main() -> None:
    task, episodes, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if mode == "hand":
        print(ro.hand_loop(task, episodes, ro.hand_policy(task)))
        return
    spec = ro.TASKS[task]
    config = RunConfig.model_validate(
        {**spec, "episodes": episodes, "seed": 0, "workers": 1, "batch_size": 1}
    )
    trust = "in-process" if mode == "in-process" else "isolated"
    oracle_spec = parse_oracle_spec(config.policy, base_dir=ro.REPO / "examples", trust=trust)
    oracle = make_oracle(oracle_spec)
    ctx = RunContext(config, str(ro.REPO), ({},), None, oracle_spec)
    k = lockstep(ctx, alone=mode == "isolated-post")
    envs = [make_base_env(config, ro.REPO) for _ in range(min(k, episodes))]
    jobs = [EpisodeJob(0, i, episode_seed(0, 0, i)) for i in range(episodes)]
    post = oracle.post_calls if mode == "isolated-post" else None  # type: ignore[attr-defined]
    try:
        oracle.probe()
        apart = oracle.channel if post is not None else None  # type: ignore[attr-defined]
        with colocated(apart) if trust == "isolated" else nullcontext():
            if apart is not None and not has_own_cpu(apart):
                raise SystemExit("no CPU free for the policy worker")
            records = run_lockstep(
                envs, jobs, oracle.act, config, calls=lockstep_calls(oracle), post=post
            )
            print(sum(r.steps for r in records))
    finally:
        oracle.close()


if __name__ == "__main__":
    main()
