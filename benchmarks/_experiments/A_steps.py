"""Experiment (helper A, issue 28.2): one rollout loop, for instruction counts under Valgrind.

    valgrind --tool=callgrind --dump-before=getppid --callgrind-out-file=OUT \
        python A_steps.py TASK EPISODES MODE [WARM [K]]

MODE: hand | in-process | isolated | isolated-post (the rollout loop of rollout_overhead.py;
isolated-post: a step's calls posted per half of the copies, the policy worker on a CPU of its
own, as a lone run has it; isolated runs colocated). The loop first runs WARM episodes (default
2: imports, first calls, caches), then calls ``os.getppid()`` before and after EPISODES more on
the same environment copies and oracle: with ``--dump-before=getppid`` Valgrind writes the
instructions of the measured episodes alone to ``OUT.2``; per step = that count / the steps
printed (no start-up in it, so no difference of two runs is needed). K: the run config's
``lockstep`` (default: the run's own default for the policy)."""

from __future__ import annotations

import os
import sys
from contextlib import nullcontext
from pathlib import Path

import gymnasium as gym

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import rollout_overhead as ro  # noqa: E402

from safecert.blackbox.backends import RunContext, lockstep  # noqa: E402
from safecert.blackbox.config import RunConfig  # noqa: E402
from safecert.blackbox.jobs import EpisodeJob, episode_seed  # noqa: E402
from safecert.blackbox.oracles import lockstep_calls, make_oracle, parse_oracle_spec  # noqa: E402
from safecert.blackbox.rollout import make_base_env, run_lockstep  # noqa: E402
from safecert.isolation import colocated, has_own_cpu  # noqa: E402


def hand(task: str, episodes: int, warm: int) -> int:
    """``rollout_overhead.hand_loop``'s loop on one ``gym.make`` copy; the marked episodes only
    are counted."""
    spec = ro.TASKS[task]
    act = ro.hand_policy(task)
    env = gym.make(spec["env"], **spec["env_kwargs"])
    steps = 0
    for i in range(warm + episodes):
        if i == warm:
            os.getppid()
            steps = 0
        obs, _ = env.reset(seed=episode_seed(0, 0, i))
        for _ in range(spec["max_steps"]):
            obs, _r, term, trunc, _info = env.step(act(obs))
            steps += 1
            if term or trunc:
                break
    os.getppid()
    return steps


def main() -> None:
    task, episodes, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    warm = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    k_set = int(sys.argv[5]) if len(sys.argv) > 5 else None
    if mode == "hand":
        print(hand(task, episodes, warm))
        return
    spec = ro.TASKS[task]
    config = RunConfig.model_validate(
        {
            **spec,
            "episodes": warm + episodes,
            "seed": 0,
            "workers": 1,
            "batch_size": 1,
            "lockstep": k_set,
        }
    )
    trust = "in-process" if mode == "in-process" else "isolated"
    oracle_spec = parse_oracle_spec(config.policy, base_dir=ro.REPO / "examples", trust=trust)
    oracle = make_oracle(oracle_spec)
    ctx = RunContext(config, str(ro.REPO), ({},), None, oracle_spec)
    k = lockstep(ctx, alone=mode == "isolated-post")
    envs = [make_base_env(config, ro.REPO) for _ in range(min(k, episodes))]
    jobs = [EpisodeJob(0, i, episode_seed(0, 0, i)) for i in range(warm + episodes)]
    post = oracle.post_calls if mode == "isolated-post" else None  # type: ignore[attr-defined]
    try:
        oracle.probe()
        apart = oracle.channel if post is not None else None  # type: ignore[attr-defined]
        with colocated(apart) if trust == "isolated" else nullcontext():
            if apart is not None and not has_own_cpu(apart):
                raise SystemExit("no CPU free for the policy worker")
            calls = lockstep_calls(oracle)
            for _ in run_lockstep(envs, jobs[:warm], oracle.act, config, calls=calls, post=post):
                pass
            os.getppid()
            records = run_lockstep(envs, jobs[warm:], oracle.act, config, calls=calls, post=post)
            steps = sum(r.steps for r in records)
            os.getppid()
            print(steps)
    finally:
        oracle.close()


if __name__ == "__main__":
    main()
