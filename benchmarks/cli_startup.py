"""Start-up of the command: wall time of `safecert bound` and of `safecert certify` (1 worker) at
each of ``--episodes``, each beside a baseline run the same way from the same process (the bare
interpreter; a hand-written Gymnasium loop script on the same task, policy, seeds and episode
count), median of ``--repeat`` runs, with the load average. Baseline and command alternate, so
load changes hit both.

    .venv/bin/python benchmarks/cli_startup.py --repeat 5 --episodes 1,300 --tasks point,cheetah
    .venv/bin/python benchmarks/cli_startup.py --episodes 300 --tasks cheetah --batch 1,8
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAFECERT = [sys.executable, "-m", "safecert.cli.main"]

HAND = """
import sys
sys.path.insert(0, {examples!r})
import numpy as np
import gymnasium as gym
import safecert.envs  # registers the built-in tasks
from vendors.point_policies import hazard_avoider
from safecert.blackbox.jobs import episode_seed
env = gym.make("SafePointGoal-v0", layout_seed=0)
for i in range(int(sys.argv[1])):
    obs, _ = env.reset(seed=episode_seed(0, 0, i))
    for t in range(200):
        obs, r, term, trunc, info = env.step(hazard_avoider(np.asarray(obs)[None])[0])
        if term or trunc:
            break
"""

HAND_CHEETAH = """
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

CONFIG_CHEETAH = """
policy = "onnx:{model}"
env = "SafeHalfCheetahVelocity-v0"
episodes = {episodes}
seed = 0
max_steps = 250
batch_size = {batch}
workers = 1
[spec]
budget = 5.0
goal = "no_termination"
cost = "info:cost"
"""

CONFIG = """
policy = "python:vendors.point_policies:hazard_avoider"
env = "SafePointGoal-v0"
env_kwargs = {{ layout_seed = 0 }}
episodes = {episodes}
seed = 0
max_steps = 200
batch_size = {batch}
workers = 1
[spec]
budget = 1000.0
goal = "steps >= 0"
"""


def wall(cmd: list[str], repeat: int, cwd: Path | None = None, fresh: Path | None = None) -> float:
    times = []
    for _ in range(repeat):
        if fresh is not None:
            subprocess.run(["rm", "-rf", str(fresh)], check=True)
        start = time.perf_counter()
        done = subprocess.run(cmd, cwd=cwd, check=False, capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        if done.returncode not in (0, 1):
            raise SystemExit(f"{' '.join(cmd)} failed: {done.stderr.strip()}")
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--episodes", default="1,300", help="comma-separated episode counts")
    parser.add_argument(
        "--tasks",
        default="point,cheetah",
        help="point (SafePointGoal, scripted "
        "policy, ~0.1 ms steps) and/or cheetah (MuJoCo HalfCheetah, ONNX policy)",
    )
    parser.add_argument(
        "--batch",
        default="1",
        help="comma-separated batch_size values for certify (env copies in lockstep, one policy "
        "call per step for all of them); the hand loop always calls the policy once per step",
    )
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="startup_"))
    subprocess.run(["cp", "-r", str(REPO / "examples" / "vendors"), str(tmp)], check=True)
    (tmp / "hand.py").write_text(HAND.format(examples=str(tmp)))
    bound = SAFECERT + ["bound", "--failures", "81", "--episodes", "10000", "--family-size", "9"]
    result: dict[str, object] = {
        "load_average_1min": os.getloadavg()[0],
        "interpreter_s": wall([sys.executable, "-c", "pass"], args.repeat),
        "bound_s": wall(bound, args.repeat),
    }
    model = str(REPO / "examples" / "vendors" / "cheetah_safe.onnx")
    (tmp / "hand_cheetah.py").write_text(HAND_CHEETAH.format(model=model))
    tasks = {
        "point": ("hand.py", CONFIG),
        "cheetah": ("hand_cheetah.py", CONFIG_CHEETAH),
    }
    for task in args.tasks.split(","):
        script, config = tasks[task]
        for n in [int(v) for v in args.episodes.split(",")]:
            for batch in [int(v) for v in args.batch.split(",")]:
                name = f"{task}{n}b{batch}.toml"
                text = config.format(episodes=n, model=model, batch=batch)
                (tmp / name).write_text(textwrap.dedent(text))
                hand, cert = [], []
                for _ in range(args.repeat):  # alternate, so load changes hit both sides
                    hand.append(wall([sys.executable, str(tmp / script), str(n)], 1))
                    cmd = SAFECERT + ["certify", name, "--out", "out", "--workers", "1"]
                    cert.append(wall(cmd, 1, tmp, tmp / "out"))
                h, c = statistics.median(hand), statistics.median(cert)
                result[f"{task}_episodes_{n}_batch_{batch}"] = {
                    "hand_loop_s": h,
                    "certify_s": c,
                    "fixed_over_hand_s": c - h,
                    "ratio": c / h,
                }
    result["load_average_1min_after"] = os.getloadavg()[0]
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
