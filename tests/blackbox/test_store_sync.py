"""``episodes.sqlite``'s durability (:mod:`safecert.blackbox.store`): every batch of episodes is
committed at ``synchronous=FULL`` (synced before ``add`` returns, with everything written before
it), while the set-up before the first batch — schema, meta — is not synced step by step."""

from __future__ import annotations

from safecert.blackbox.jobs import EpisodeRecord
from safecert.blackbox.store import EpisodeStore, open_run_store

FULL, NORMAL = 2, 1


def _synchronous(store: EpisodeStore) -> int:
    return int(store._db.execute("PRAGMA synchronous").fetchone()[0])


def _record(index: int) -> EpisodeRecord:
    return EpisodeRecord(0, index, 7 + index, 1.0, 0.0, True, False, True, 5, None)


def test_every_batch_is_synced_and_the_set_up_is_not(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text("")
    store = open_run_store(tmp_path / "out" / "episodes.sqlite", [], config, resume=False)
    try:
        assert _synchronous(store) == NORMAL  # schema, inputs and config path: one sync later
        store.set_meta("obs_ranges", None)
        assert store.add([_record(0), _record(1)]) == 2
        assert _synchronous(store) == FULL
        assert store.add([_record(2)]) == 1
        assert _synchronous(store) == FULL
        assert store.get_meta("config_path") == str(config.resolve())
    finally:
        store.close()
    with EpisodeStore(tmp_path / "out" / "episodes.sqlite", create=False) as read:
        assert [r.index for r in read.records()] == [0, 1, 2]
        assert read.get_meta("config_path") == str(config.resolve())
    assert not (tmp_path / "out" / "episodes.sqlite-wal").exists()  # checkpointed at close
