"""Episode stores are complete or rejected (issue 21, item 3).

A cell's episodes must be exactly 0 … N-1 (fixed N: ``parameters.episodes``; sequential: the
decision point, where the rule, replayed over the cell's stored outcomes, stops), and every row must hold values of its
column's type. The forgers below edit a real run's store and then re-fix everything a digest or a
recomputed result can re-fix, so the only check left to catch them is the one under test.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from safecert.blackbox.backends import LocalBackend
from safecert.blackbox.certify import blackbox_result
from safecert.blackbox.jobs import episode_seed
from safecert.blackbox.plan import plan_run
from safecert.blackbox.sequential import (
    SequentialSettings,
    build_rule,
    certify_sequential,
    outcomes_prefix,
    sequential_result,
)
from safecert.blackbox.store import EpisodeStore
from safecert.certificate import canonical_json, read_certificate
from safecert.cli.main import main
from safecert.errors import DataError
from safecert.stats.sequential import UNDECIDED, stopping_index
from safecert.stats.sequential_plan import make_rule
from tests.blackbox.pipeline_helpers import cartpole_run

CAP = 120


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(fixed-N run folder, sequential run folder): real CartPole runs through the CLI."""
    base = tmp_path_factory.mktemp("complete")
    fixed = base / "fixed"
    assert main(["certify", str(cartpole_run(base / "fi", episodes=8)), "--out", str(fixed),
                 "--workers", "1"]) in (0, 1)  # fmt: skip
    seq = base / "seq"
    config = cartpole_run(base / "si", episodes=CAP)
    assert main(["certify", str(config), "--out", str(seq), "--sequential",
                 "--workers", "1"]) in (0, 1)  # fmt: skip
    return fixed, seq


@pytest.fixture
def fixed(runs, tmp_path):
    return Path(shutil.copytree(runs[0], tmp_path / "fixed"))


@pytest.fixture
def seq(runs, tmp_path):
    return Path(shutil.copytree(runs[1], tmp_path / "seq"))


def _sql(folder: Path, *statements: tuple) -> None:
    db = sqlite3.connect(folder / "episodes.sqlite")
    with db:
        for statement in statements:
            db.execute(*statement)
    db.close()


def _refix(folder: Path) -> None:
    """What a forger with the tool does after editing the store: recompute the result, the verdict
    and the rows digest from the edited store (only a signature would bind them)."""
    path = folder / "certificate.json"
    cert = read_certificate(path)
    plan = plan_run(Path(cert.inputs.root) / "run.toml")
    with EpisodeStore(folder / "episodes.sqlite", create=False) as store:
        if cert.kind == "sequential":
            verdict, result = sequential_result(
                plan.config,
                plan.family,
                store,
                cost_range=plan.cost_range,
                return_range=plan.return_range,
            )
        else:
            verdict, result = blackbox_result(
                plan.config,
                plan.family,
                store.records(),
                cost_range=plan.cost_range,
                return_range=plan.return_range,
                obs_ranges=store.get_meta("obs_ranges"),
                rejudged=None,
            )
        digest = store.rows_sha256()
    data = json.loads(path.read_text())
    data["verdict"] = verdict
    data["result"] = result.model_dump(mode="json")
    (entry,) = [e for e in data["inputs"]["evidence"] if e["role"] == "episodes"]
    entry["sha256"] = digest
    path.write_text(canonical_json(data))


def _verify(folder: Path, capsys) -> tuple[int, list[dict], str]:
    """(exit code, the failed checks, stderr) of ``safecert verify --json``."""
    capsys.readouterr()
    code = main(["verify", str(folder / "certificate.json"), "--json"])
    out, err = capsys.readouterr()
    failed = [c for c in json.loads(out)["checks"] if not c["ok"]] if code in (0, 1) else []
    return code, failed, err


def _only_cell_fails(folder: Path, capsys, cell: int) -> str:
    """Verify rejects the forgery, and only through the completeness of ``cell``: every other
    check (digest, seeds, the recomputed result) was re-fixed by the forger. Returns its detail."""
    code, failed, _ = _verify(folder, capsys)
    assert code == 1
    assert [c["name"] for c in failed] == [f"cell {cell} episodes"], failed
    return failed[0]["detail"]


def _sequential_cells(folder: Path) -> list:
    return read_certificate(folder / "certificate.json").result.sequential.cells


def test_honest_runs_verify(runs, capsys):
    for folder in runs:
        code, failed, _ = _verify(folder, capsys)
        assert code == 0 and failed == []
    cells = _sequential_cells(runs[1])
    # the fixture exercises what the rule is about: a cell decided before its cap, a failing cell
    assert any(c.episodes_used < CAP for c in cells)
    assert any(c.decision == "FAIL" for c in cells)


def test_fixed_store_with_a_gap(fixed, capsys):
    _sql(fixed, ("DELETE FROM episodes WHERE cell = 1 AND idx = 3",))
    _refix(fixed)
    assert "missing 3" in _only_cell_fails(fixed, capsys, 1)


def test_fixed_store_with_a_row_beyond_n(fixed, capsys):
    _sql(
        fixed,
        ("UPDATE episodes SET idx = 8, seed = ? WHERE cell = 0 AND idx = 7",
         (episode_seed(1, 0, 8),)),
    )  # fmt: skip
    _refix(fixed)
    detail = _only_cell_fails(fixed, capsys, 0)
    assert "missing 7" in detail and "outside 8" in detail


def _without_constraints(folder: Path) -> None:
    """Rebuild the episodes table as a forger's hand-made store would be: same columns and types,
    no primary key, no NOT NULL."""
    _sql(
        folder,
        ("CREATE TABLE loose AS SELECT * FROM episodes",),
        ("DROP TABLE episodes",),
        ("ALTER TABLE loose RENAME TO episodes",),
    )


def _one_line_exit_2(folder: Path, capsys) -> str:
    code, _, err = _verify(folder, capsys)
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


def test_duplicated_index_in_a_store_without_the_primary_key(fixed, capsys):
    _without_constraints(fixed)
    _sql(fixed, ("INSERT INTO episodes SELECT * FROM episodes WHERE cell = 2 AND idx = 5",))
    err = _one_line_exit_2(fixed, capsys)
    assert "table episodes" in err and "(2, 5) is stored twice" in err


@pytest.mark.parametrize(
    "column, value, shown",
    [
        ("ret", "'many'", "text 'many'"),
        ("cost", "'none'", "text 'none'"),
        ("ret", "X'00ff'", "blob"),
        ("idx", "3.5", "real 3.5"),
        ("steps", "NULL", "NULL"),
        ("goal", "2", "integer 2"),
        ("truncated", "-1", "integer -1"),
        ("seed", "'s'", "text 's'"),
    ],
)
def test_wrong_type_is_one_line_exit_2(fixed, capsys, column, value, shown):
    _without_constraints(fixed)
    _sql(fixed, (f"UPDATE episodes SET {column} = {value} WHERE cell = 1 AND idx = 4",))
    err = _one_line_exit_2(fixed, capsys)
    assert "table episodes, row" in err and f"column {column} holds {shown}" in err


def test_text_return_in_the_store_as_written_is_one_line(fixed, capsys):
    """The auditor's case, in the schema certify writes (REAL keeps non-numeric text as text)."""
    _sql(fixed, ("UPDATE episodes SET ret = 'many' WHERE cell = 0 AND idx = 2",))
    assert "column ret holds text 'many'" in _one_line_exit_2(fixed, capsys)
    capsys.readouterr()
    assert main(["rejudge", str(fixed), "--budget", "1", "--p-star", "0.5"]) == 2
    assert "column ret holds text" in capsys.readouterr().err


def test_missing_column_and_bad_meta_are_one_line(fixed, capsys, tmp_path):
    other = Path(shutil.copytree(fixed, tmp_path / "other"))
    _sql(fixed, ("ALTER TABLE episodes DROP COLUMN steps",))
    assert "no such column: steps" in _one_line_exit_2(fixed, capsys)
    _sql(other, ("INSERT OR REPLACE INTO meta VALUES ('obs_ranges', '{not json')",))
    assert "table meta, key 'obs_ranges'" in _one_line_exit_2(other, capsys)


def test_store_reader_rejects_what_verify_rejects(tmp_path):
    """The checks live in the one reader, so certify --resume, rejudge and report get them too."""
    path = tmp_path / "episodes.sqlite"
    with EpisodeStore(path) as store:
        store._db.execute("INSERT INTO episodes VALUES (0, 0, 1, 'x', 0, 1, 0, 0, 3, NULL)")
        with pytest.raises(DataError, match=r"row 1 \(cell 0, idx 0\): column ret holds text"):
            store.records()
        with pytest.raises(DataError, match="column ret"):
            store.rows_sha256()


def _stopped_cell(folder: Path) -> tuple[int, int]:
    """(cell, stored count = decision point) of a cell the rule decided before the cap."""
    cell = next(c for c in _sequential_cells(folder) if c.episodes_used < CAP)
    return cell.cell, cell.episodes_used


@pytest.mark.parametrize("where", ["last", "first", "middle"])
def test_sequential_store_with_one_row_deleted(seq, capsys, where):
    cell, n = _stopped_cell(seq)
    index = {"last": n - 1, "first": 0, "middle": n // 2}[where]
    _sql(seq, ("DELETE FROM episodes WHERE cell = ? AND idx = ?", (cell, index)))
    _refix(seq)
    detail = _only_cell_fails(seq, capsys, cell)
    if index == n - 1:  # contiguous, but the rule has not stopped before its decision point
        assert detail.endswith(f"needs at least: {n}")
    else:
        assert f"missing {index}" in detail


@pytest.mark.parametrize("cell_kind", ["stopped", "failing"])
def test_sequential_store_with_a_row_appended(seq, capsys, cell_kind):
    cells = _sequential_cells(seq)
    if cell_kind == "stopped":
        cell, n = _stopped_cell(seq)
    else:
        failing = next(c for c in cells if c.decision == "FAIL")
        cell, n = failing.cell, failing.episodes_used
    _sql(
        seq,
        (
            "INSERT INTO episodes SELECT cell, idx + 1, ?, ret, cost, goal, terminated, "
            "truncated, steps, failure_reason FROM episodes WHERE cell = ? AND idx = ?",
            (episode_seed(1, cell, n), cell, n - 1),
        ),
    )
    _refix(seq)
    assert _only_cell_fails(seq, capsys, cell).endswith(f"stops at: {n}")


@pytest.mark.parametrize("method", ["onesided", "mixture", "looks", "betting", "curtail"])
def test_the_decision_point_is_the_only_complete_count(method):
    """The count certify stores is where the rule, read in index order, stops; no shorter prefix
    is complete (the rule has not stopped on it) and no longer sequence is (it stops earlier)."""
    rule = make_rule(method, 0.05, 0.1 / 9, 600)
    rng = np.random.default_rng(11)
    for p in (0.0, 0.02, 0.05, 0.08, 0.3):
        for _ in range(4):
            x = (rng.random(600) < p).astype(np.int64)
            n = stopping_index(rule, x)
            assert n is not None and n == rule.decide(x).episodes
            assert rule.decide(x[:n]).decision != UNDECIDED
            assert stopping_index(rule, x[:n]) == n
            for k in {0, n // 2, n - 1, max(n - 8, 0)} - {n}:
                assert stopping_index(rule, x[:k]) is None
                assert rule.decide(x[:k]).decision == UNDECIDED


@pytest.mark.parametrize("cut", ["just before the decision", "mid-way"])
def test_a_resumed_run_stores_what_an_uninterrupted_one_does(seq, capsys, cut):
    """A killed run leaves each cell a prefix of consecutive indices (its commits end anywhere);
    the resumed run continues from there to the same decision point, so the store, its digest and
    every count equal the uninterrupted run's."""
    whole = read_certificate(seq / "certificate.json")
    cell, n = _stopped_cell(seq)
    plan = plan_run(Path(whole.inputs.root) / "run.toml")
    rule = build_rule(plan.config, plan.family, SequentialSettings())
    with EpisodeStore(seq / "episodes.sqlite", create=False) as store:
        x = outcomes_prefix(store.records(cell), plan.config.spec.budget)
    assert stopping_index(rule, x) == n
    keep = n - 1 if cut == "just before the decision" else n // 2
    _sql(seq, ("DELETE FROM episodes WHERE cell = ? AND idx >= ?", (cell, keep)))
    resumed = certify_sequential(plan.config_path, seq, LocalBackend(1), True, False)
    assert resumed.inputs.evidence == whole.inputs.evidence
    assert resumed.result == whole.result
    assert _verify(seq, capsys)[0] == 0
