"""Seeds, jobs and the episode store."""

from __future__ import annotations

import sqlite3

import numpy as np

from safecert.blackbox.jobs import EpisodeRecord, episode_seed, make_jobs
from safecert.blackbox.store import EpisodeStore


def test_episode_seeds_are_deterministic_distinct_and_spawned_by_cell_and_index():
    seeds = {(c, i): episode_seed(5, c, i) for c in range(4) for i in range(200)}
    assert len(set(seeds.values())) == len(seeds)
    assert seeds[(2, 7)] == episode_seed(5, 2, 7) != episode_seed(6, 2, 7)
    words = np.random.SeedSequence(5, spawn_key=(2, 7)).generate_state(2, np.uint32)
    assert seeds[(2, 7)] == ((int(words[0]) << 32) | int(words[1])) >> 1
    assert all(0 <= s < 2**63 for s in seeds.values())
    jobs = make_jobs(5, 1, 10, skip={(1, 3), (1, 4)})
    assert [j.index for j in jobs] == [0, 1, 2, 5, 6, 7, 8, 9]


def _rec(cell, index, cost=0.0):
    return EpisodeRecord(cell, index, 10 * cell + index, 1.5, cost, True, False, True, 7, None)


def test_store_round_trip_no_double_counting_and_wal(tmp_path):
    path = tmp_path / "episodes.sqlite"
    with EpisodeStore(path) as store:
        assert store.add([_rec(0, 0), _rec(0, 1), _rec(1, 0, cost=3.0)]) == 3
        assert store.add([_rec(0, 1), _rec(0, 2)]) == 1  # (0, 1) is already there
        store.set_meta("obs_ranges", {"range": [1.0, 2.0]})
    with EpisodeStore(path, create=False) as store:
        assert store.count() == 4 and store.count(0) == 3
        assert store.done() == {(0, 0), (0, 1), (0, 2), (1, 0)}
        assert store.records(1) == [_rec(1, 0, cost=3.0)]
        assert store.get_meta("obs_ranges") == {"range": [1.0, 2.0]}
        assert store.get_meta("missing", 42) == 42
    mode = sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
