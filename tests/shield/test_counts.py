"""Count tables (``safecert shield count``, ``--counts``): JSONL and Parquet count the same as the
streaming log reader, tables merge by summing, certificates from counts equal those from the logs
and are re-derived by ``verify`` from the same tables; other models' tables, committed-budget
sets and bad transitions are refused in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from safecert.audit import Evidence
from safecert.certificate import read_certificate
from safecert.errors import ConfigError, DataError
from safecert.shield.certify import certify_shield, load_inputs
from safecert.shield.check import check
from safecert.shield.counts import (
    count_logs,
    estimates_from_counts,
    merge,
    model_digest,
    read_counts,
    write_counts,
)
from safecert.shield.estimate import estimate
from safecert.shield.logs import iter_steps
from safecert.shield.model import load_model
from tests.conftest import REPO, run_cli

PAYMENTS = REPO / "examples" / "payments"
GRID = REPO / "examples" / "shield"


def _split(src: Path, a: Path, b: Path) -> None:
    """Whole episodes alternately into two files (two machines' logs)."""
    with a.open("w") as fa, b.open("w") as fb:
        for line in src.open():
            ep = json.loads(line)["episode"]
            (fa if hash(str(ep)) % 2 else fb).write(line)


def _to_parquet(src: Path, out: Path) -> None:
    """The same steps as Parquet; predicate states as structs, halt's next_state null."""
    recs = [json.loads(line) for line in src.open() if line.strip()]
    cols = {k: [r.get(k) for r in recs] for k in ("episode", "t", "state", "action", "next_state")}
    cols["episode"] = [str(e) for e in cols["episode"]]
    pq.write_table(pa.table(cols), out)


@pytest.mark.parametrize("example", ["payments", "grid"])
def test_jsonl_and_parquet_count_what_the_log_reader_counts(example, tmp_path):
    model_path, logs = (
        (PAYMENTS / "model.toml", PAYMENTS / "steps.jsonl")
        if example == "payments"
        else (GRID / "grid.toml", GRID / "grid_logs.jsonl")
    )
    model = load_model(model_path)
    ref = estimate(model, iter_steps(logs, model), anytime=True)
    parquet = tmp_path / "steps.parquet"
    _to_parquet(logs, parquet)
    for source in (logs, parquet):
        table = count_logs(model, [source])
        est = estimates_from_counts(model, table, anytime=True)
        assert np.array_equal(est.counts, ref.counts) and np.array_equal(est.visits, ref.visits)
        assert (table.steps, table.episodes) == (ref.steps, ref.episodes)
        # written and read back: the same table
        back = read_counts(write_counts(table, model, tmp_path / "c.parquet"), model)
        assert np.array_equal(back.counts, table.counts) and back.steps == table.steps


def test_merged_tables_certify_as_the_whole_log_and_verify(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model_path = PAYMENTS / "model.toml"
    model = load_model(model_path)
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _split(PAYMENTS / "steps.jsonl", a, b)
    ca = write_counts(count_logs(model, [a]), model, tmp_path / "a.parquet")
    cb = write_counts(count_logs(model, [b]), model, tmp_path / "b.parquet")
    merged = merge(model, [ca, cb])
    whole = count_logs(model, [PAYMENTS / "steps.jsonl"])
    assert np.array_equal(merged.counts, whole.counts) and merged.steps == whole.steps
    # count also merges tables given as inputs
    again = count_logs(model, [ca, cb])
    assert np.array_equal(again.counts, whole.counts)

    shield = PAYMENTS / "cert" / "shield.json"
    from_counts = certify_shield(model_path, None, tmp_path / "fc", shield_path=shield,
                                 anytime=True, counts=[ca, cb])  # fmt: skip
    from_logs = certify_shield(model_path, PAYMENTS / "steps.jsonl", tmp_path / "fl",
                               shield_path=shield, anytime=True)  # fmt: skip
    res_c, res_l = from_counts.certificate.result, from_logs.certificate.result
    assert res_c.bound == res_l.bound and res_c.rows == res_l.rows
    roles = [e.role for e in from_counts.certificate.inputs.files]
    assert roles == ["model", "counts", "counts", "shield"]

    cert_path = tmp_path / "fc" / "certificate.json"
    report = check(read_certificate(cert_path), Evidence(cert_path))
    assert report.ok, [(c.name, c.detail) for c in report.checks if not c.ok]
    # a certificate claiming the logs too (certify reads one or the other) is refused
    doc = json.loads(cert_path.read_text())
    logs_entry = next(e for e in from_logs.certificate.inputs.files if e.role == "logs")
    doc["inputs"]["files"].append(logs_entry.model_dump(mode="json"))
    both = cert_path.with_name("both.json")
    both.write_text(json.dumps(doc))
    failed = {c.name for c in check(read_certificate(both), Evidence(both)).checks if not c.ok}
    assert failed == {"inputs: count tables, no logs"}, failed
    # a count table changed after certification: verify fails on its digest and on the result
    table = pq.read_table(cb)
    bumped = table.set_column(3, "count", pa.array([n + 1 for n in table["count"].to_pylist()]))
    meta = dict(table.schema.metadata)
    header = json.loads(meta[b"safecert.counts"])
    header["steps"] += len(bumped)
    meta[b"safecert.counts"] = json.dumps(header).encode()
    pq.write_table(bumped.replace_schema_metadata(meta), cb)
    report = check(read_certificate(cert_path), Evidence(cert_path))
    failed = {c.name for c in report.checks if not c.ok}
    assert any("counts sha256" in name for name in failed), failed
    assert "result" in failed and not report.ok


def test_other_model_committed_sets_and_bad_transitions_are_refused(tmp_path):
    payments = load_model(PAYMENTS / "model.toml")
    grid = load_model(GRID / "grid.toml")
    assert model_digest(payments) != model_digest(grid)
    table = write_counts(count_logs(payments, [PAYMENTS / "steps.jsonl"]), payments,
                         tmp_path / "p.parquet")  # fmt: skip
    with pytest.raises(DataError, match="not this model"):
        read_counts(table, grid)
    with pytest.raises(ConfigError, match="order-free"):
        load_inputs(GRID / "grid.toml", None, counts=[table])  # grid: committed budget
    with pytest.raises(ConfigError, match="either --logs or --counts"):
        load_inputs(PAYMENTS / "model.toml", PAYMENTS / "steps.jsonl", counts=[table])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"episode": "e", "t": 0, "state": "r0c0", "action": "up",
                               "next_state": "r6c6"}) + "\n")  # fmt: skip
    with pytest.raises(DataError, match="not a declared successor") as err:
        count_logs(grid, [bad])
    assert "bad.jsonl" in str(err.value)
    garbled = tmp_path / "garbled.jsonl"
    garbled.write_text("{not json\n")
    with pytest.raises(DataError, match="garbled.jsonl"):
        count_logs(grid, [garbled])


def test_cli_count_then_certify_from_counts(tmp_path):
    out = tmp_path / "c.parquet"
    res = run_cli("shield", "count", "--model", PAYMENTS / "model.toml", PAYMENTS / "steps.jsonl",
                  "--out", out, "--json")  # fmt: skip
    assert res.code == 0, res.stderr
    assert res.json()["steps"] == sum(1 for _ in (PAYMENTS / "steps.jsonl").open())
    cert = run_cli("shield", "certify", "--model", PAYMENTS / "model.toml", "--counts", out,
                   "--anytime", "--out", tmp_path / "cert", "--json")  # fmt: skip
    assert cert.code == 0, cert.stderr
    assert cert.json()["confidence"] == "anytime"
    plan = run_cli("shield", "plan", "--model", PAYMENTS / "model.toml", "--counts", out,
                   "--anytime", "--shield", PAYMENTS / "cert" / "shield.json", "--epsilon", "0.1",
                   "--json")  # fmt: skip
    assert plan.code == 0, plan.stderr
    wrong = run_cli("shield", "certify", "--model", GRID / "grid.toml", "--counts", out,
                    "--anytime", "--out", tmp_path / "x")  # fmt: skip
    assert wrong.code == 2 and len(wrong.stderr.strip().splitlines()) == 1
    assert "count the logs again" in wrong.stderr
    committed = run_cli("shield", "certify", "--model", PAYMENTS / "model.toml", "--counts", out,
                        "--out", tmp_path / "y")  # fmt: skip
    assert committed.code == 2 and "--anytime" in committed.stderr
    assert not (tmp_path / "y" / "certificate.json").exists()
    shutil.rmtree(tmp_path / "cert")


def test_tables_that_are_not_count_tables_are_one_line_errors(tmp_path):
    model = load_model(GRID / "grid.toml")
    plain = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"state": ["r0c0"], "action": ["up"], "next_state": ["r0c0"],
                             "count": [1]}), plain)  # fmt: skip
    with pytest.raises(DataError, match="no safecert.counts header"):
        read_counts(plain, model)
    garbled = tmp_path / "garbled.parquet"
    pq.write_table(
        pa.table({"state": ["r0c0"]}).replace_schema_metadata({b"safecert.counts": b"{oops"}),
        garbled,
    )
    with pytest.raises(DataError, match="garbled"):
        read_counts(garbled, model)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"episode": "e", "t": 0, "state": "nowhere", "action": "up",
                               "next_state": "r0c0"}) + "\n")  # fmt: skip
    res = run_cli("shield", "count", "--model", GRID / "grid.toml", bad, "--out",
                  tmp_path / "c.parquet")  # fmt: skip
    assert res.code == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "bad.jsonl" in res.stderr and "nowhere" in res.stderr
    assert not (tmp_path / "c.parquet").exists()
    not_parquet = tmp_path / "broken.parquet"
    not_parquet.write_text("not parquet\n")
    res = run_cli("shield", "count", "--model", GRID / "grid.toml", not_parquet, "--out",
                  tmp_path / "c.parquet")  # fmt: skip
    assert res.code == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "broken.parquet" in res.stderr and "Traceback" not in res.stderr
