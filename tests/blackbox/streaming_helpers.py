"""Helpers of the streaming tests: a one-step environment with a known failure rate, and a
backend wrapper that notes every job its source hands out."""

from __future__ import annotations

import textwrap
from pathlib import Path

from safecert.blackbox.store import EpisodeStore

COIN = '''
"""One-step episodes that fail (cost 1) with probability p; a fraction slow_p of them is slow."""
import time

import gymnasium as gym
import numpy as np


class Coin(gym.Env):
    observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float64)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, p=0.02, slow_p=0.0, slow_s=0.0):
        self.p, self.slow_p, self.slow_s = p, slow_p, slow_s

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.u = self.np_random.random(2)
        return np.zeros(1), {}

    def step(self, action):
        if self.u[1] < self.slow_p:
            time.sleep(self.slow_s)
        return np.zeros(1), 0.0, False, True, {"cost": float(self.u[0] < self.p)}


def policy(obs):
    return np.zeros(len(obs), dtype=np.int64)
'''


def coin_run(folder: Path, *, batch_size: int, p: float = 0.02, slow_p: float = 0.0) -> Path:
    """A config of two cells (nominal and obs noise) of Bernoulli(p) failures, cap 400."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "coin.py").write_text(COIN)
    path = folder / "run.toml"
    path.write_text(
        textwrap.dedent(f"""
        policy = "python:coin:policy"
        env = "python:coin:Coin"
        env_kwargs = {{ p = {p}, slow_p = {slow_p}, slow_s = 0.05 }}
        trust = "in-process"
        episodes = 400
        seed = 7
        max_steps = 1
        batch_size = {batch_size}
        [spec]
        budget = 0.5
        p_star = 0.05
        confidence = 0.9
        cost = "info:cost"
        [envelope]
        obs_noise = {{ kind = "gaussian", levels = [0.0, 0.1] }}
        """)
    )
    return path


class Watched:
    """A real backend whose job source is watched: every job it hands out is noted."""

    def __init__(self, backend) -> None:
        self.backend = backend
        self.issued: list[tuple[int, int]] = []

    def worker_count(self, ctx):
        return self.backend.worker_count(ctx)

    def stream(self, source, ctx):
        watched = self

        class Noting:
            per_worker = source.per_worker

            def take(self):
                jobs = source.take()
                watched.issued.extend((j.cell, j.index) for j in jobs)
                return jobs

        return self.backend.stream(Noting(), ctx)


def check_overshoot(out: Path, cert, issued: list[tuple[int, int]], in_flight: int) -> None:
    """Each cell stores exactly its episodes before the decision point τ; at most ``in_flight``
    of its episodes were handed out at or after τ, and the run statistic says how many."""
    with EpisodeStore(out / "episodes.sqlite", create=False) as store:
        meta = store.get_meta("sequential_overshoot")
        for d in cert.result.sequential.cells:
            assert d.decision in ("PASS", "FAIL", "INCONCLUSIVE")
            tau = d.episodes_used
            assert [r.index for r in store.records(d.cell)] == list(range(tau))
            past = [i for c, i in issued if c == d.cell and i >= tau]
            assert len(past) <= in_flight
            assert meta[str(d.cell)] == {"overshoot": len(past), "in_flight_bound": in_flight}
    assert len(issued) == len(set(issued))  # nothing handed out twice
