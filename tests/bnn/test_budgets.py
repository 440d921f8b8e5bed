"""Budgets in work units (issue 21, item 5): a config and seed give the same certificate on an idle
machine and on a loaded one; a wall-clock guard that fires says so (``machine_dependent``); the
removed ``limits.clock`` and certificates from before are one clear line each."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from safecert.audit import Evidence
from safecert.bnn.certify import certify_run
from safecert.bnn.check import check, parameters_config
from safecert.bnn.config import BnnConfig
from safecert.bnn.setup import benchmark_config
from safecert.certificate import BnnCertificate, read_certificate
from safecert.errors import ConfigError, DataError

#: the busy processes competing with a run for the machine's cores
BUSY = 6


@contextmanager
def busy(n: int = BUSY) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``n`` processes spinning ``while True: pass`` for the duration; always reaped."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(n):
            procs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def reproducible(cert: BnnCertificate) -> dict[str, Any]:
    """Everything a certificate states but its timings: the parameters and every result field
    other than ``runtimes_s`` and the rows' ``runtime_s``."""
    result = cert.result.model_dump(mode="json")
    result.pop("runtimes_s")
    for row in result["search"]:
        row.pop("runtime_s")
    return {"verdict": cert.verdict, "parameters": cert.parameters, "result": result}


def idle_and_loaded(cfg: BnnConfig, out: Path) -> tuple[BnnCertificate, BnnCertificate, float]:
    """Run ``cfg`` twice, idle and under :data:`BUSY` busy processes; returns both certificates
    and the loaded run's wall-clock seconds per CPU second (how hard the load bit)."""
    idle = certify_run(cfg, None, out / "idle").certificate
    with busy() as procs:
        loaded = certify_run(cfg, None, out / "loaded").certificate
        assert all(p.poll() is None for p in procs)  # they competed for the whole run
    rt = loaded.result.runtimes_s
    assert rt is not None
    return idle, loaded, rt.wall_s / max(rt.total_s, 1e-9)


def _small() -> BnnConfig:
    """The smallest config that runs the whole loop: witness search, learner, falsifier,
    counterexamples from the MILPs, a proof (LDS at X0 0.4, 0.5σ; about 2.5 CPU-seconds)."""
    return benchmark_config(
        "lds_x04",
        epsilon="0.5sigma",
        invariant={"hidden": [8]},
        learner={"epochs": 100, "warm_epochs": 20, "batch_size": 1024, "learning_rate": 0.02},
        data={
            "bootstrap": False,
            "initial_samples": 200,
            "unsafe_samples": 200,
            "falsifier_samples": 2000,
            "witness_rollouts": 500,
        },
    )


@pytest.mark.slow  # 40–100 s on 2 cores (measured with --durations); runs in make test-all
def test_same_certificate_idle_and_under_load(tmp_path: Path) -> None:
    idle, loaded, slowdown = idle_and_loaded(_small(), tmp_path)
    r = idle.result
    assert idle.verdict == "SAFE" and not r.machine_dependent
    assert r.verifier_calls >= 2 and r.counterexamples and r.sampled_violations  # the whole loop
    assert reproducible(loaded) == reproducible(idle)
    print(f"loaded run: {slowdown:.2f} wall-s per CPU-s")


@pytest.mark.slow
def test_lds_one_sigma_same_certificate_idle_and_under_load(tmp_path: Path) -> None:
    """The published LDS policy at 1σ with the default budgets (``--benchmark lds --epsilon
    1sigma``): SAFE with the same invariant whether or not six processes compete for the cores."""
    idle, loaded, slowdown = idle_and_loaded(benchmark_config("lds", epsilon="1sigma"), tmp_path)
    assert idle.verdict == "SAFE" and not idle.result.machine_dependent
    assert reproducible(loaded) == reproducible(idle)
    print(f"loaded run: {slowdown:.2f} wall-s per CPU-s")


def test_node_budget_is_unknown_and_not_machine_dependent(tmp_path: Path) -> None:
    """A MILP that spends its node budget ends the attempt UNKNOWN ("node limit"), the same on
    every machine: not machine-dependent, and ``safecert verify`` agrees."""
    cfg = _small().model_copy(
        update={"limits": _small().limits.model_copy(update={"solver_nodes": 1})}
    )
    run = certify_run(cfg, None, tmp_path / "out")
    r = run.certificate.result
    assert run.certificate.verdict == "UNKNOWN" and not r.machine_dependent
    assert r.reason == "verifier inconclusive (closure: node limit)"
    assert run.certificate.parameters["limits"]["solver_nodes"] == 1
    assert check(run.certificate, Evidence(run.path)).ok


def test_parameters_record_every_work_budget() -> None:
    params = benchmark_config("lds").model_dump(mode="json")
    assert params["limits"] == {
        "max_iterations": 200,
        "solver_nodes": 100_000,
        "per_epsilon_s": 1800.0,
        "total_s": 7200.0,
        "solver_s": 600.0,
    }
    for table, key in (
        ("learner", "epochs"),
        ("learner", "warm_epochs"),
        ("data", "witness_rollouts"),
        ("data", "falsifier_samples"),
        ("data", "bootstrap_states"),
    ):
        assert isinstance(params[table][key], int)
    del params["limits"]["solver_nodes"]  # never filled in by a default
    with pytest.raises(DataError, match=r"parameters\.limits\.solver_nodes: is missing"):
        parameters_config(params)


def test_a_guard_that_fires_is_stated_and_re_derived(unknown_run: Path) -> None:
    """The per-ε guard cut the run: the reason says so, both flags are set, and flipping either
    flag is a failing check."""
    cert = read_certificate(unknown_run)
    assert isinstance(cert, BnnCertificate)
    r = cert.result
    assert r.reason.startswith("wall-clock guard limits.per_epsilon_s")
    assert r.machine_dependent and r.search[0].machine_dependent
    assert check(cert, Evidence(unknown_run)).ok
    flat = cert.result.model_copy(update={"machine_dependent": False})
    report = check(cert.model_copy(update={"result": flat}), Evidence(unknown_run))
    assert [c.name for c in report.failed] == ["machine_dependent"]
    row = r.search[0].model_copy(update={"machine_dependent": False})
    rows = cert.result.model_copy(update={"search": [row]})
    report = check(cert.model_copy(update={"result": rows}), Evidence(unknown_run))
    assert [c.name for c in report.failed] == ["search[0].machine_dependent", "machine_dependent"]


def test_removed_clock_key_is_one_line_exit_2(cli, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^limits\.clock: was removed"):
        benchmark_config("lds", limits={"clock": "cpu"})
    cfg = tmp_path / "c.toml"
    system = Path(__file__).resolve().parents[2] / "src" / "safecert" / "bnn" / "data"
    cfg.write_text(
        'policy = "benchmark:lds"\n'
        + (system / "lds_x04.system.toml").read_text()
        + '\n[limits]\nclock = "cpu"\n'
    )
    res = cli("bnn", "verify", str(cfg), "--out", str(tmp_path / "o"))
    lines = res.stderr.strip().splitlines()
    assert res.code == 2 and len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert "limits.clock: was removed" in lines[0] and "delete the key" in lines[0]


def test_old_certificates_are_refused_with_one_line(cli, unknown_run: Path, tmp_path: Path) -> None:
    doc = json.loads(unknown_run.read_text())
    out = tmp_path / "old"
    out.mkdir()
    (out / "policy.npz").write_bytes((unknown_run.parent / "policy.npz").read_bytes())
    # before work-unit budgets: limits in seconds on a clock, no machine_dependent
    old = json.loads(json.dumps(doc))
    old["parameters"]["limits"]["clock"] = "wall"
    del old["parameters"]["limits"]["solver_nodes"]
    del old["result"]["machine_dependent"]
    for row in old["result"]["search"]:
        del row["machine_dependent"]
    (out / "certificate.json").write_text(json.dumps(old))
    res = cli("verify", str(out / "certificate.json"))
    lines = res.stderr.strip().splitlines()
    assert res.code == 2 and len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert "certificate.result" in lines[0] and "before work-unit budgets" in lines[0]
    # the parameters of an old run under a current result: named by its field
    params = json.loads(json.dumps(doc["parameters"]))
    params["limits"]["clock"] = "wall"
    with pytest.raises(DataError, match=r"^parameters\.limits\.clock: a certificate from before"):
        parameters_config(params)


# ---- guards that hold (issue 25.2) ---------------------------------------------------------------
def _guarded(where: str, limit_s: float) -> BnnConfig:
    """A config whose ``where`` (bootstrap, learner) would take far longer than ``limit_s``."""
    data: dict[str, Any] = {"initial_samples": 100, "unsafe_samples": 100, "witness_rollouts": 0}
    learner: dict[str, Any] = {"epochs": 1}
    if where == "bootstrap":
        data |= {"bootstrap": True, "bootstrap_states": 20_000, "bootstrap_horizon": 5000}
    else:
        data |= {"bootstrap": False, "initial_samples": 100_000, "unsafe_samples": 100_000}
        learner = {"epochs": 10_000, "batch_size": 64}
    return benchmark_config(
        "lds_x04",
        epsilon="1sigma",
        data=data,
        learner=learner,
        limits={"per_epsilon_s": limit_s},
    )


@pytest.mark.parametrize("where", ["bootstrap", "learner"])
def test_the_per_epsilon_guard_holds_inside_long_steps(where: str, tmp_path: Path) -> None:
    """The bootstrap's rollouts and the learner's epochs ask the guard: a 1.5 s guard ends the
    attempt within a fraction of a second of it (without the checks: minutes), and the reason
    prints the configured limit — never what was left of it, never a negative number."""
    import time

    t = time.perf_counter()
    run = certify_run(_guarded(where, 1.5), None, tmp_path / "out")
    wall = time.perf_counter() - t
    r = run.certificate.result
    assert run.certificate.verdict == "UNKNOWN" and r.machine_dependent
    assert r.reason.startswith("wall-clock guard limits.per_epsilon_s = 1.5 s reached"), r.reason
    assert r.runtimes_s is not None and r.runtimes_s.wall_s < 1.5 + 2.0  # one rollout step or batch
    assert wall < 1.5 + 15.0  # + writing the certificate, the plot and the report
    print(f"{where}: {r.reason}; attempt {r.runtimes_s.wall_s:.2f} wall-s, run {wall:.2f} s")
    assert r.reason.startswith(
        f"wall-clock guard limits.per_epsilon_s = 1.5 s reached in the {where}"
    )
    assert check(run.certificate, Evidence(run.path)).ok  # the checker re-derives it


def test_learner_stops_when_asked() -> None:
    """``Learner.fit(stop=…)`` trains no epoch once the guard says stop: the fresh network."""
    import numpy as np

    from safecert.bnn.cegis import TrainingData
    from safecert.bnn.learner import Learner

    cfg = benchmark_config("lds_x04")
    learner = Learner(cfg.learner_settings(), low=np.full(2, -1.0), high=np.full(2, 1.0))
    rng = np.random.default_rng(0)
    data = TrainingData(rng.uniform(-1, 1, (64, 2)), rng.integers(0, 2, 64).astype(float))
    x = rng.uniform(-1, 1, (16, 2))
    fresh = learner.new_network(3).network().forward(x)
    stopped = learner.fit(data, 3, stop=lambda: True).network().forward(x)
    trained = learner.fit(data, 3).network().forward(x)
    np.testing.assert_array_equal(stopped, fresh)
    assert not np.allclose(trained, fresh)
