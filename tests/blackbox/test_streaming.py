"""Decisions on each completed episode (issue 28): at most the episodes in flight (workers ×
batch_size) run past a cell's decision point, the decision point — and so the certificate — does
not depend on completion order or worker count, and ``verify`` re-derives it from the store."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest

from safecert.blackbox.backends import LocalBackend
from safecert.blackbox.jobs import EpisodeRecord, episode_seed
from safecert.blackbox.plan import plan_run
from safecert.blackbox.sequential import certify_sequential, sequential_result
from safecert.blackbox.store import EpisodeStore
from safecert.blackbox.streaming import CellStreams
from safecert.certificate import canonical_json, content_sha256
from safecert.errors import ConfigError
from safecert.stats.sequential import stopping_index
from safecert.stats.sequential_plan import make_rule
from tests.blackbox.streaming_helpers import Watched, check_overshoot, coin_run


@pytest.mark.parametrize("workers", [1, 2])
def test_overshoot_is_at_most_the_episodes_in_flight(tmp_path, workers):
    """Whatever the timing (a tenth of the episodes are slow), the episodes of a cell handed out at
    or after its decision point number at most workers × batch_size; the store holds exactly the
    episodes before it; the run statistic says how many ran past it."""
    batch = 3
    config = coin_run(tmp_path, batch_size=batch, slow_p=0.1)
    with LocalBackend(workers) as local:
        backend = Watched(local)
        cert = certify_sequential(config, tmp_path / "out", backend, False, False)
    check_overshoot(tmp_path / "out", cert, backend.issued, workers * batch)
    if workers == 1:  # in-process: the chunk each decision fell in ran whole
        chunk = batch
        for d in cert.result.sequential.cells:
            tau = d.episodes_used
            past = [i for c, i in backend.issued if c == d.cell and i >= tau]
            assert len(past) == min(-tau % chunk, 400 - tau)


def test_lockstep_is_refused_in_a_sequential_run(tmp_path):
    """K > 1 would put more episodes in flight than the certificate's note bounds: one line."""
    config = coin_run(tmp_path, batch_size=2)
    config.write_text(config.read_text().replace("batch_size", "lockstep = 4\nbatch_size"))
    with pytest.raises(ConfigError, match="lockstep = 4 in a sequential run") as err:
        certify_sequential(config, tmp_path / "out", LocalBackend(1), False, False)
    assert err.value.field == "lockstep" and not (tmp_path / "out" / "episodes.sqlite").exists()


def test_same_certificate_whatever_the_workers_and_batch(tmp_path):
    """The decision point depends on the outcomes only: 1 worker in-process, 2 worker processes
    with slow episodes, batch 1 or 4 — one store digest, one result."""
    slow = coin_run(tmp_path / "b4", batch_size=4, slow_p=0.1)
    one = certify_sequential(slow, tmp_path / "b4" / "w1", LocalBackend(1), False, False)
    two = certify_sequential(slow, tmp_path / "b4" / "w2", LocalBackend(2), False, False)
    assert content_sha256(one) == content_sha256(two)  # same config: the same certificate
    plain = coin_run(tmp_path / "b1", batch_size=1)
    three = certify_sequential(plain, tmp_path / "b1" / "w1", LocalBackend(1), False, False)
    # batch_size and env_kwargs differ (inputs); the evidence and the result do not
    certs = [one, two, three]
    assert len({c.inputs.evidence[0].sha256 for c in certs}) == 1
    assert all(c.result == one.result and c.verdict == one.verdict for c in certs)
    assert any(d.episodes_used < 400 for d in certs[0].result.sequential.cells)


def test_verify_rederives_the_decision_point(cli_here, tmp_path):
    config = coin_run(tmp_path, batch_size=4)
    out = tmp_path / "out"
    res = cli_here("certify", config, "--out", out, "--sequential", "--workers", "2", "--json")
    assert res.code in (0, 1), res.stderr
    ok = cli_here("verify", out / "certificate.json", "--json")
    assert ok.code == 0 and ok.json()["ok"], ok.stdout
    cert = res.json()
    assert cert["result"]["sequential"]["order"] == "episode index"
    cell = cert["result"]["sequential"]["cells"][0]
    details = {c["name"]: c["detail"] for c in ok.json()["checks"]}
    assert details["cell 0 episodes"].endswith(f"stops at: {cell['episodes_used']}")
    # a forger keeps one overshoot episode and re-fixes the digest and the result: only the
    # re-derived decision point catches it
    db = sqlite3.connect(out / "episodes.sqlite")
    with db:
        db.execute(
            "INSERT INTO episodes SELECT cell, idx + 1, ?, ret, cost, goal, terminated, "
            "truncated, steps, failure_reason FROM episodes WHERE cell = 0 AND idx = ?",
            (episode_seed(7, 0, cell["episodes_used"]), cell["episodes_used"] - 1),
        )
    db.close()
    plan = plan_run(config)
    with EpisodeStore(out / "episodes.sqlite", create=False) as store:
        verdict, result = sequential_result(
            plan.config,
            plan.family,
            store,
            cost_range=plan.cost_range,
            return_range=plan.return_range,
        )
        cert["verdict"] = verdict
        cert["result"] = result.model_dump(mode="json")
        cert["inputs"]["evidence"][0]["sha256"] = store.rows_sha256()
    (out / "certificate.json").write_text(canonical_json(cert))
    bad = cli_here("verify", out / "certificate.json", "--json")
    assert bad.code == 1
    failed = [c for c in bad.json()["checks"] if not c["ok"]]
    assert [c["name"] for c in failed] == ["cell 0 episodes"]
    assert failed[0]["detail"].endswith(f"stops at: {cell['episodes_used']}")


def _record(cell: int, index: int, failed: bool) -> EpisodeRecord:
    return EpisodeRecord(cell, index, 0, 0.0, float(failed), True, False, True, 1)


@pytest.mark.parametrize("method", ["onesided", "looks", "betting", "curtail"])
@pytest.mark.parametrize("workers, batch", [(1, 1), (2, 3), (4, 2)])
def test_any_completion_order_stores_the_decisive_prefix(method, workers, batch):
    """The scheduler against adversarial completion orders: chunks finish in random order and
    their records arrive shuffled. Whatever the order, each cell stores exactly episodes
    0 … τ−1 (τ the rule's stopping point on the whole sequence), never more than workers × batch
    episodes are in flight, and fewer than that are handed out at or after τ."""
    rule = make_rule(method, 0.05, 0.05, 300)
    rng = np.random.default_rng([workers, batch, len(method)])
    for p in (0.0, 0.02, 0.1, 0.3):
        x = (rng.random((2, 300)) < p).astype(np.int64)
        decided: dict[int, int] = {}
        streams = CellStreams(
            rule,
            seed=1,
            budget=0.5,
            stage1=0,
            stored=[[], []],
            batch_size=batch,
            window=workers * batch,
            on_decided=lambda cell, res, extra, seen=decided: seen.setdefault(cell, extra),
        )
        stored: dict[int, list[int]] = {0: [], 1: []}
        running: list[list] = []
        issued: list[tuple[int, int]] = []
        while True:
            while len(running) < workers and (chunk := streams.take()):
                running.append(chunk)
                issued.extend((j.cell, j.index) for j in chunk)
            assert sum(len(c) for c in running) <= workers * batch
            if not running or streams.finished:
                break
            chunk = running.pop(int(rng.integers(len(running))))
            for j in rng.permutation(len(chunk)):
                job = chunk[j]
                for r in streams.arrived(
                    _record(job.cell, job.index, bool(x[job.cell, job.index]))
                ):
                    stored[r.cell].append(r.index)
        for cell in (0, 1):
            tau = stopping_index(rule, x[cell])
            assert stored[cell] == list(range(tau))
            past = sum(1 for c, i in issued if c == cell and i >= tau)
            assert past == decided[cell] <= workers * batch - 1


def test_overshoot_meta_is_not_evidence(tmp_path):
    """The run statistic lives beside the evidence: the rows digest ignores it."""
    config = coin_run(tmp_path, batch_size=2)
    cert = certify_sequential(config, tmp_path / "out", LocalBackend(1), False, False)
    with EpisodeStore(tmp_path / "out" / "episodes.sqlite") as store:
        before = store.rows_sha256()
        store.set_meta("sequential_overshoot", {"0": {"overshoot": 99, "in_flight_bound": 1}})
        assert store.rows_sha256() == before
    (entry,) = cert.inputs.evidence
    assert entry.sha256 == before
    assert "sequential_overshoot" in json.dumps(cert.result.sequential.note)


def test_a_sequential_run_of_an_isolated_policy_steps_one_episode_at_a_time(tmp_path):
    """lockstep's default of 16 is for fixed-N runs: a sequential run of a policy in a policy
    worker keeps the in-flight bound at workers × batch_size (1 here: no overshoot)."""
    config = coin_run(tmp_path, batch_size=1)
    config.write_text(config.read_text().replace('trust = "in-process"', 'trust = "isolated"'))
    with LocalBackend(1) as local:
        backend = Watched(local)
        cert = certify_sequential(config, tmp_path / "out", backend, False, False)
    check_overshoot(tmp_path / "out", cert, backend.issued, 1)
    for d in cert.result.sequential.cells:  # one episode at a time: none past a decision
        assert max(i for c, i in backend.issued if c == d.cell) == d.episodes_used - 1
