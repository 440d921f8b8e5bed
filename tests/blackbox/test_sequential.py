"""Sequential certification end to end: real CartPole episodes, the real CLI, verify, resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from safecert.blackbox.backends import LocalBackend
from safecert.blackbox.certify import certify
from safecert.blackbox.sequential import certify_sequential
from safecert.blackbox.store import EpisodeStore
from safecert.errors import ConfigError
from safecert.stats.sequential_plan import make_rule
from tests.blackbox.pipeline_helpers import cartpole_run


def _with_sequential(config: Path, table: str) -> Path:
    config.write_text(config.read_text() + "\n[sequential]\n" + table + "\n")
    return config


def test_cli_sequential_certifies_and_verifies(cli_here, tmp_path):
    config = cartpole_run(tmp_path, episodes=400)
    out = tmp_path / "out"
    res = cli_here("certify", config, "--out", out, "--sequential", "--json", "--workers", "2")
    assert res.code in (0, 1), res.stderr
    cert = res.json()
    seq = cert["result"]["sequential"]
    assert seq["method"] == "onesided" and seq["cap"] == 400
    assert seq["delta_cell"] == pytest.approx(0.1 / 4)
    assert len(seq["cells"]) == 4
    for c, cell in zip(seq["cells"], cert["result"]["cells"], strict=True):
        assert c["decision"] in ("PASS", "FAIL", "INCONCLUSIVE")
        assert c["episodes_used"] == cell["episodes"] <= 400  # the store: the decisive prefix
        assert cell["decision"] == c["decision"] and cell["upper_bound"] == c["upper_bound"]
        if c["decision"] == "PASS":
            assert c["upper_bound"] <= 0.3
    assert seq["episodes_used"] < seq["episodes_fixed_n"] / 3  # the point of it
    ok = cli_here("verify", str(out / "certificate.json"), "--json")
    assert ok.code == 0 and ok.json()["ok"], ok.stdout
    names = {c["name"] for c in ok.json()["checks"]}
    assert {"result", "verdict", "cell 0 episodes"} <= names
    # a certificate that claims a different stopping point is caught
    data = json.loads((out / "certificate.json").read_text())
    data["result"]["sequential"]["cells"][1]["episodes_used"] -= 1
    (out / "tampered.json").write_text(json.dumps(data))
    bad = cli_here("verify", str(out / "tampered.json"), "--json")
    assert bad.code == 1
    failed = [c["name"] for c in bad.json()["checks"] if not c["ok"]]
    assert failed == ["result.sequential.cells[1].episodes_used"]


class _Interrupted(Exception):
    pass


class _DiesAfter:
    """A real LocalBackend that is killed (raises) after ``n`` records, mid-run."""

    def __init__(self, n: int) -> None:
        self.left = n
        self.local = LocalBackend(1)

    def worker_count(self, ctx):
        return 1

    def stream(self, source, ctx):
        with self.local:
            for record in self.local.stream(source, ctx):
                if self.left == 0:
                    raise _Interrupted
                self.left -= 1
                yield record


def _decisions(cert):
    return [
        {k: getattr(c, k) for k in ("decision", "episodes_used", "failures_used", "upper_bound")}
        for c in cert.result.sequential.cells
    ]


def test_resume_after_interruption_gives_the_same_decisions(tmp_path):
    config = cartpole_run(tmp_path, episodes=300)
    whole = certify_sequential(config, tmp_path / "whole", LocalBackend(1), False, False)
    with pytest.raises(_Interrupted):
        certify_sequential(config, tmp_path / "cut", _DiesAfter(37), False, False)
    with EpisodeStore(tmp_path / "cut" / "episodes.sqlite") as store:
        assert store.count() == 32  # the first commit; the records after it are lost
        for cell in range(4):  # every cell a prefix of consecutive indices
            assert [r.index for r in store.records(cell)] == list(range(store.count(cell)))
    with pytest.raises(ConfigError, match="--resume"):
        certify_sequential(config, tmp_path / "cut", LocalBackend(1), False, False)
    resumed = certify_sequential(config, tmp_path / "cut", LocalBackend(1), True, False)
    assert _decisions(resumed) == _decisions(whole)
    assert resumed.verdict == whole.verdict
    again = certify_sequential(config, tmp_path / "cut", LocalBackend(1), True, False)
    assert again.result == resumed.result  # nothing left to run


def test_curtailment_takes_the_fixed_n_decisions(tmp_path):
    fixed = certify(
        cartpole_run(tmp_path / "f", episodes=40),
        tmp_path / "f" / "out",
        backend=LocalBackend(1),
        progress=False,
    )
    config = _with_sequential(cartpole_run(tmp_path / "c", episodes=40), 'method = "curtail"')
    seq = certify_sequential(config, tmp_path / "c" / "out", LocalBackend(1), False, False)
    assert [c.decision for c in seq.result.cells] == [c.decision for c in fixed.result.cells]
    assert seq.verdict == fixed.verdict


def test_looks_decisions_fall_on_looks(tmp_path):
    config = _with_sequential(cartpole_run(tmp_path, episodes=200), 'method = "looks"')
    cert = certify_sequential(config, tmp_path / "out", LocalBackend(1), False, False)
    rule = make_rule("looks", 0.3, 0.1 / 4, 200)
    looks = {int(n) for n in rule.checks}
    assert cert.result.sequential.rule["looks"] == sorted(looks)
    for c in cert.result.sequential.cells:
        assert c.episodes_used in looks


def test_bad_sequential_table_is_one_line(cli_here, tmp_path):
    config = _with_sequential(cartpole_run(tmp_path, episodes=20), 'methd = "mixture"')
    res = cli_here("certify", str(config), "--out", str(tmp_path / "o"))
    assert res.code == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "sequential.methd" in res.stderr
    config = _with_sequential(cartpole_run(tmp_path / "b", episodes=20), 'method = "guess"')
    res = cli_here("certify", str(config), "--out", str(tmp_path / "o2"))
    assert res.code == 2 and "sequential.method" in res.stderr
