"""Episode jobs and records: what a worker is asked to run and what it reports.

Seeds: every episode's seed is derived from the master seed by ``SeedSequence(master,
spawn_key=(cell, index))`` — the NumPy way to spawn independent streams — so each (cell, index)
has its own stream, independent of every other episode, of the worker that runs it and of the
batch it is stepped in. Outcomes are therefore i.i.d. within a cell and reruns are bit-identical.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import asdict, dataclass

import numpy as np

#: spawn-key cell used for the nominal rollouts that estimate observation ranges
RANGE_CELL = 2**31 - 1


@dataclass(frozen=True)
class EpisodeJob:
    cell: int
    index: int
    seed: int


@dataclass(frozen=True)
class EpisodeRecord:
    """One finished episode; ``failure_reason`` is set when the oracle (or the env) failed."""

    cell: int
    index: int
    seed: int
    ret: float
    cost: float
    goal: bool
    terminated: bool
    truncated: bool
    steps: int
    failure_reason: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def episode_seed(master_seed: int, cell: int, index: int) -> int:
    """A 63-bit seed for episode ``index`` of ``cell`` (deterministic, independent streams)."""
    words = np.random.SeedSequence(master_seed, spawn_key=(cell, index)).generate_state(
        2, np.uint32
    )
    return int(((int(words[0]) << 32) | int(words[1])) >> 1)


def make_jobs(
    master_seed: int, cell: int, episodes: int, skip: AbstractSet[tuple[int, int]] = frozenset()
) -> list[EpisodeJob]:
    """Jobs 0..episodes-1 of ``cell`` minus those already done (``skip`` holds (cell, index))."""
    return [
        EpisodeJob(cell, i, episode_seed(master_seed, cell, i))
        for i in range(episodes)
        if (cell, i) not in skip
    ]
