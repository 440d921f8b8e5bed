"""Whole processes: `safecert --help`, `safecert bound` and `safecert certify` (1 worker) against
baselines run the same way in the same run — the bare interpreter, and a hand-written Gymnasium
loop script on the same task, policy, seeds and episode count.

Each repeat runs the baseline and then the command (alternating, so load changes hit both) and
records both wall time and CPU time (user + system of the child, from ``getrusage``: less
sensitive to other jobs on a shared machine). The CPU time does NOT include safecert's policy and
environment workers: they are reaped by their supervisor, whose ``getrusage`` never reaches this
process (a policy that burns 3 s of CPU adds nothing to it), so an isolated run's CPU ratio
understates its cost; compare isolated runs by wall time. The hand loop's CPU time also holds the
≈ 0.1 s an idle OpenBLAS thread spins after NumPy loads, which a ``safecert`` process does not
spend (it sets ``OPENBLAS_THREAD_TIMEOUT``: ``safecert.cli.blas``), so CPU ratios favour ``safecert``
by that much; the wall times are what counts. Reported per row: the medians, and the ratio
command / baseline of each repeat pair as median [min–max]. Bytecode is compiled once before
timing (a warm-up run of each command with bytecode writing allowed), as an installed package has
it. Tasks:

- ``cartpole``: SafeCartPole-v0, NumPy policy ``cartpole_policies:balance`` (≈ 20 µs a step);
- ``point``: SafePointGoal-v0, scripted ``point_policies:hazard_avoider``;
- ``cheetah``: MuJoCo SafeHalfCheetahVelocity-v0, ONNX policy (≈ 40 µs a step).

``--trust`` applies to every task's policy (the ``python:`` ones and the ONNX model): ``isolated``
(the default of a run config: the policy in a worker process) and/or ``in-process``; each is a row
of its own (an older ``--before`` tree runs the ONNX model in process whatever the row says when
its default was to).

    .venv/bin/python benchmarks/cli_startup.py --repeat 5 --episodes 1,300 --tasks cartpole,cheetah

``--before SRC`` also runs every command with ``PYTHONPATH=SRC`` (an older ``src`` folder, e.g.
``git archive COMMIT src | tar -x -C /tmp/before``) in the same repeats, between the baseline and
the command: before/after in one run. safecert's own policy workers start with ``python -I`` and
so run the installed code either way.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAFECERT = [sys.executable, "-m", "safecert.cli.main"]
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

HAND_PYTHON = """
import sys
sys.path.insert(0, {examples!r})
import numpy as np
import gymnasium as gym
import safecert.envs  # registers the built-in tasks
from vendors.{module} import {function} as policy
from safecert.blackbox.jobs import episode_seed
env = gym.make({env!r}{make_kwargs})
for i in range(int(sys.argv[1])):
    obs, _ = env.reset(seed=episode_seed(0, 0, i))
    for t in range({steps}):
        obs, r, term, trunc, info = env.step(policy(np.asarray(obs)[None])[0])
        if term or trunc:
            break
"""

HAND_ONNX = """
import sys
import numpy as np
import gymnasium as gym
import onnxruntime as ort
import safecert.envs  # registers the built-in tasks
from safecert.blackbox.jobs import episode_seed
options = ort.SessionOptions()
options.intra_op_num_threads = 1
options.inter_op_num_threads = 1
session = ort.InferenceSession({model!r}, options, providers=["CPUExecutionProvider"])
name = session.get_inputs()[0].name
env = gym.make("SafeHalfCheetahVelocity-v0")
for i in range(int(sys.argv[1])):
    obs, _ = env.reset(seed=episode_seed(0, 0, i))
    for t in range(250):
        action = session.run(None, {{name: np.asarray(obs, dtype=np.float32)[None]}})[0][0]
        obs, r, term, trunc, info = env.step(action)
        if term or trunc:
            break
"""

CONFIG = """
policy = "{policy}"
env = "{env}"
{kwargs_line}
episodes = {episodes}
seed = 0
max_steps = {steps}
batch_size = {batch}
workers = 1
{trust_line}
[spec]
budget = 1000.0
goal = "{goal}"
cost = "info:cost"
"""

TASKS = {
    "cartpole": {
        "module": "cartpole_policies",
        "function": "balance",
        "env": "SafeCartPole-v0",
        "kwargs": {},
        "steps": 500,
        "goal": "no_termination",
    },
    "point": {
        "module": "point_policies",
        "function": "hazard_avoider",
        "env": "SafePointGoal-v0",
        "kwargs": {"layout_seed": 0},
        "steps": 200,
        "goal": "steps >= 0",
    },
    "cheetah": {"env": "SafeHalfCheetahVelocity-v0", "kwargs": {}, "steps": 250},
}


def timed(
    cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None
) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child and its children) of one run of ``cmd``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, check=False, capture_output=True, text=True, env=env or ENV)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed: {done.stderr.strip()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def paired(
    base: list[str],
    cmd: list[str],
    repeat: int,
    cwd: Path,
    fresh: Path | None,
    before: dict[str, str] | None = None,
) -> dict:
    """Alternate ``base`` and ``cmd`` ``repeat`` times (with ``before``, the environment of the
    older code: ``cmd`` under it too, in between); medians and per-pair ratios."""
    rows: list[tuple[float, ...]] = []
    for _ in range(repeat):
        b = timed(base, cwd)
        old: tuple[float, ...] = ()
        if before is not None:
            if fresh is not None:
                subprocess.run(["rm", "-rf", str(fresh)], check=True)
            old = timed(cmd, cwd, before)
        if fresh is not None:  # a new run each time, not a resumed one
            subprocess.run(["rm", "-rf", str(fresh)], check=True)
        c = timed(cmd, cwd)
        rows.append((*b, *c, *old))

    def summary(values: list[float]) -> list[float]:
        return [round(statistics.median(values), 4), round(min(values), 4), round(max(values), 4)]

    older = {}
    if before is not None:
        older = {
            "before_wall_s": summary([r[4] for r in rows]),
            "before_wall_ratio": summary([r[4] / r[0] for r in rows]),
            "before_wall_over_baseline_s": summary([r[4] - r[0] for r in rows]),
            "before_cpu_s": summary([r[5] for r in rows]),
            "before_cpu_ratio": summary([r[5] / r[1] for r in rows]),
            "before_cpu_over_baseline_s": summary([r[5] - r[1] for r in rows]),
        }
    return {
        **older,
        "baseline_wall_s": summary([r[0] for r in rows]),
        "command_wall_s": summary([r[2] for r in rows]),
        "wall_ratio": summary([r[2] / r[0] for r in rows]),
        "wall_over_baseline_s": summary([r[2] - r[0] for r in rows]),
        "baseline_cpu_s": summary([r[1] for r in rows]),
        "command_cpu_s": summary([r[3] for r in rows]),
        "cpu_ratio": summary([r[3] / r[1] for r in rows]),
        "cpu_over_baseline_s": summary([r[3] - r[1] for r in rows]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--episodes", default="1,300", help="comma-separated episode counts")
    parser.add_argument("--tasks", default="cartpole,cheetah", help="cartpole, point, cheetah")
    parser.add_argument("--trust", default="isolated,in-process", help="isolated, in-process")
    parser.add_argument("--batch", default="1", help="comma-separated batch_size values")
    parser.add_argument("--skip-startup", action="store_true", help="no --help / bound rows")
    parser.add_argument("--before", type=Path, help="an older src folder, run in the same repeats")
    args = parser.parse_args()
    before = None
    if args.before is not None:
        before = {**ENV, "PYTHONPATH": str(args.before.resolve())}
    tmp = Path(tempfile.mkdtemp(prefix="startup_"))
    subprocess.run(["cp", "-r", str(REPO / "examples" / "vendors"), str(tmp)], check=True)
    model = str(REPO / "examples" / "vendors" / "cheetah_safe.onnx")
    print("header: median [min, max]; ratios are per repeat pair", file=sys.stderr)
    result: dict[str, object] = {
        "load_average_1min": os.getloadavg()[0],
        "cpus": os.cpu_count(),
        "before": None if args.before is None else str(args.before),
    }
    interpreter = [sys.executable, "-c", "pass"]
    bound = SAFECERT + ["bound", "--failures", "81", "--episodes", "10000", "--family-size", "9"]
    if not args.skip_startup:
        for name, cmd in (("help", SAFECERT + ["--help"]), ("bound", bound)):
            timed(cmd, tmp)  # warm-up: compiles the bytecode
            if before is not None:
                timed(cmd, tmp, before)
            result[name] = paired(interpreter, cmd, args.repeat, tmp, None, before)
            print(name, json.dumps(result[name]), file=sys.stderr, flush=True)
    for task in args.tasks.split(","):
        spec = TASKS[task]
        hand = tmp / f"hand_{task}.py"
        if task == "cheetah":
            hand.write_text(HAND_ONNX.format(model=model))
            policies = [(f"onnx:{model}", f'trust = "{t}"', t) for t in args.trust.split(",")]
        else:
            kwargs = "".join(f", {k}={v!r}" for k, v in spec["kwargs"].items())
            text = HAND_PYTHON.format(examples=str(tmp), make_kwargs=kwargs, **spec)
            hand.write_text(text)
            policy = f"python:vendors.{spec['module']}:{spec['function']}"
            policies = [(policy, f'trust = "{t}"', t) for t in args.trust.split(",")]
        goal = spec.get("goal", "no_termination")
        kwargs_line = (
            "env_kwargs = { " + ", ".join(f"{k} = {v}" for k, v in spec["kwargs"].items()) + " }"
            if spec["kwargs"]
            else ""
        )
        for n in [int(v) for v in args.episodes.split(",")]:
            for policy, trust_line, trust in policies:
                for batch in [int(v) for v in args.batch.split(",")]:
                    name = f"{task}_{trust}_{n}_b{batch}.toml"
                    text = CONFIG.format(
                        policy=policy,
                        env=spec["env"],
                        kwargs_line=kwargs_line,
                        episodes=n,
                        steps=spec["steps"],
                        batch=batch,
                        trust_line=trust_line,
                        goal=goal,
                    )
                    (tmp / name).write_text(textwrap.dedent(text))
                    cmd = SAFECERT + ["certify", name, "--out", "out", "--workers", "1"]
                    subprocess.run(["rm", "-rf", str(tmp / "out")], check=True)
                    timed(cmd, tmp)  # warm-up: compiles the bytecode
                    if before is not None:
                        subprocess.run(["rm", "-rf", str(tmp / "out")], check=True)
                        timed(cmd, tmp, before)
                    key = f"{task}_{trust}_episodes_{n}_batch_{batch}"
                    base = [sys.executable, str(hand), str(n)]
                    result[key] = paired(base, cmd, args.repeat, tmp, tmp / "out", before)
                    print(key, json.dumps(result[key]), file=sys.stderr, flush=True)
    result["load_average_1min_after"] = os.getloadavg()[0]
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
