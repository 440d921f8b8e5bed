"""Scripted SafePointGoal policies under range-scaled Gaussian observation noise.

100 random layouts (``layout_seed=None``, reset seeds 0..99); noise standard deviation is
``level * (high - low)`` of each observation dimension; an episode *fails* if it spends more than
``--budget`` steps in hazards or misses the goal (the examples' spec).

    .venv/bin/python benchmarks/point_policies.py --episodes 100
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np

import safecert.envs  # noqa: F401

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from vendors.point_policies import goal_seeker, hazard_avoider  # noqa: E402


def evaluate(policy, level: float, episodes: int, budget: float) -> dict[str, float]:
    env = gym.make("SafePointGoal-v0", layout_seed=None)
    space = env.observation_space
    scale = level * (space.high - space.low)
    rng = np.random.default_rng(0)
    goals = costly = fails = 0
    for seed in range(episodes):
        obs, _ = env.reset(seed=seed)
        cost, done, info = 0.0, False, {}
        while not done:
            noisy = obs + rng.normal(size=obs.shape) * scale
            obs, _, terminated, truncated, info = env.step(policy(noisy[None])[0])
            cost += info["cost"]
            done = terminated or truncated
        goals += bool(info["is_success"])
        costly += cost > 0
        fails += cost > budget or not info["is_success"]
    return {"goal": goals, "any_cost": int(costly), "fail": int(fails)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--budget", type=float, default=5.0)
    args = parser.parse_args()
    for policy in (goal_seeker, hazard_avoider):
        for level in (0.0, 0.01, 0.02):
            row = {"policy": policy.__name__, "noise": level}
            row.update(evaluate(policy, level, args.episodes, args.budget))
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
