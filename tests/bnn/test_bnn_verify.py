"""The bnn certificate's builders (safecert.bnn.certify) and checker (safecert.bnn.check)."""

from __future__ import annotations

import json
import math

import pytest

from safecert.audit import Evidence
from safecert.bnn.cegis import guard_reason
from safecert.bnn.certify import NO_ATTEMPT, POLICY_FILE, epsilon_record
from safecert.bnn.check import check, parameters_config, replay_search
from safecert.bnn.result import SearchRow
from safecert.bnn.search import SearchPlan, epsilon_sequence, search_plan
from safecert.bnn.setup import benchmark_config
from safecert.bnn.spec import BayesianSpec, Epsilon, parse_epsilon
from safecert.certificate import read_certificate
from safecert.errors import DataError
from safecert.verification import VerificationReport


def test_epsilon_record_in_sigma_and_absolute():
    spec = BayesianSpec((0.0, 0.05, 0.05), (False, True, True))
    rec = epsilon_record(parse_epsilon("1.5sigma"), spec)
    assert (rec.value, rec.unit, rec.sigma) == (1.5, "sigma", 1.5)
    assert rec.absolute == pytest.approx([0.0, 0.075, 0.075], abs=1e-15)
    rec = epsilon_record(parse_epsilon("0.1"), spec)
    assert rec.unit == "absolute" and rec.sigma == pytest.approx(2.0)
    mixed = BayesianSpec((0.0, 0.1, 0.05), (False, True, True))
    assert epsilon_record(Epsilon(0.1, False), mixed).sigma is None


def _row(eps: Epsilon, verdict: str) -> SearchRow:
    return SearchRow(
        epsilon=eps.value,
        unit="sigma" if eps.in_sigma else "absolute",
        verdict=verdict,
        reason="r",
        iterations=1,
        runtime_s=0.0,
        machine_dependent=False,
        witness=None,
    )


def test_search_replay_derives_the_certified_epsilon_and_catches_a_forged_row():
    ladder = tuple(parse_epsilon(e) for e in ("0.5sigma", "1sigma", "2sigma"))
    plan = SearchPlan(ladder, 2, 60.0, "limits.total_s")
    # what the search tries when 0.5σ holds and 1σ fails: 0.5, 1, then 0.75, then 0.625 or 0.875
    seq = epsilon_sequence(plan.ladder, plan.bisection_steps)
    tried = [next(seq), seq.send(True), seq.send(False), seq.send(True)]
    assert [e.value for e in tried] == [0.5, 1.0, 0.75, 0.875]
    rows = [_row(tried[0], "SAFE"), _row(tried[1], "UNKNOWN"), _row(tried[2], "SAFE")]
    report = VerificationReport("bnn")
    eps, shown, certified, nxt = replay_search(plan, rows, report)
    assert report.ok and certified and eps == Epsilon(0.75, True) and shown == 2
    assert nxt == Epsilon(0.875, True)  # the search had one more step: a guard stopped it
    full = [*rows, _row(nxt, "UNKNOWN")]
    assert replay_search(plan, full, VerificationReport("bnn"))[3] is None
    # a row claiming a rung the search would not have tried next
    forged = [rows[0], rows[1], _row(Epsilon(2.0, True), "SAFE")]
    report = VerificationReport("bnn")
    eps, _, _, _ = replay_search(plan, forged, report)
    assert eps == Epsilon(0.75, True)  # the derived ε, not the claimed one
    assert [c.name for c in report.failed] == ["search[2].epsilon"]
    assert "0.75" in report.failed[0].detail and "2.0" in report.failed[0].detail
    # more rows than the search has steps
    report = VerificationReport("bnn")
    replay_search(plan, [*rows, _row(Epsilon(0.875, True), "SAFE"), rows[0]], report)
    assert [c.name for c in report.failed] == ["search (length)"]
    # no attempt: the first planned ε, no row, nothing certified
    assert replay_search(plan, [], VerificationReport("bnn")) == (
        plan.ladder[0],
        None,
        False,
        plan.ladder[0],
    )


def test_search_plan_is_the_ladder_only_with_search_enabled():
    cfg = benchmark_config("lds", epsilon="1.5sigma")
    assert search_plan(cfg) == SearchPlan(
        (Epsilon(1.5, True),), 0, cfg.limits.per_epsilon_s, "limits.per_epsilon_s"
    )
    cfg = benchmark_config("lds", search={"enabled": True, "ladder": ["0.5sigma", "1sigma"]})
    assert search_plan(cfg).ladder == (Epsilon(0.5, True), Epsilon(1.0, True))
    assert search_plan(cfg).total_time_s == cfg.limits.total_s
    assert search_plan(cfg).guard_key == "limits.total_s"


def test_parameters_are_complete_and_not_coerced():
    good = benchmark_config("lds").model_dump(mode="json")
    assert parameters_config(good) == benchmark_config("lds")
    missing = json.loads(json.dumps(good))
    del missing["limits"]["solver_s"]  # a default would silently fill it in
    with pytest.raises(DataError, match=r"parameters\.limits\.solver_s: is missing"):
        parameters_config(missing)
    text = json.loads(json.dumps(good))
    text["bayesian"]["sigma"] = "0.1"
    with pytest.raises(DataError, match=r"parameters\.bayesian\.sigma"):
        parameters_config(text)
    extra = {**good, "margin": 1e-3}
    with pytest.raises(DataError, match=r"parameters\.margin"):
        parameters_config(extra)


def test_unknown_certificate_checks_everything_it_states(unknown_run):
    cert = read_certificate(unknown_run)
    assert cert.verdict == "UNKNOWN" and cert.result.reason.startswith("wall-clock guard")
    assert cert.result.machine_dependent and cert.result.search[0].machine_dependent
    assert cert.result.checks.closure == "not reached" and len(cert.result.search) == 1
    assert cert.result.verifier_margin == 1e-6
    assert math.isfinite(cert.result.runtimes_s.total_s)
    report = check(cert, Evidence(unknown_run))
    assert report.ok, report.failed
    names = [c.name for c in report.checks]
    for name in ("epsilon", "acceptance_probability", "verifier_margin", "search", "verdict"):
        assert name in names
    assert "checks" not in names  # a run cut short: nothing to re-prove


def test_missing_policy_copy_is_one_data_error(unknown_run, tmp_path):
    cert = read_certificate(unknown_run)
    with pytest.raises(DataError, match=POLICY_FILE):
        check(cert, Evidence(unknown_run, data_dir=tmp_path / "nowhere"))


def test_no_attempt_certificate_is_checked_and_cannot_be_flipped(tmp_path):
    """A budget spent before the first rung: UNKNOWN, no invariant, ε = the first planned rung."""
    from safecert.bnn.certify import certify_run

    cfg = benchmark_config(
        "lds", search={"enabled": True, "ladder": ["0.5sigma", "1sigma"]}, limits={"total_s": 1e-9}
    )
    run = certify_run(cfg, None, tmp_path / "out")
    r = run.certificate.result
    assert run.certificate.verdict == "UNKNOWN" and r.machine_dependent
    assert r.reason == f"{NO_ATTEMPT}; " + guard_reason(
        "limits.total_s = 1e-09 s reached before ε = 0.5sigma"
    )
    assert r.invariant is None and r.runtimes_s is None and r.search == []
    assert (r.epsilon.value, r.epsilon.unit) == (0.5, "sigma") and run.plot is None
    assert check(run.certificate, Evidence(run.path)).ok
    flipped = run.certificate.model_copy(update={"verdict": "SAFE"})
    report = check(flipped, Evidence(run.path))
    assert {c.name for c in report.failed} == {"invariant", "verdict"}


def _config_run(tmp_path, **options):
    """A real run of a config file, cut off at once (UNKNOWN), with ``options`` applied as the
    command line applies them."""
    import shutil

    from safecert.bnn.certify import certify_run
    from safecert.bnn.setup import load_config, with_options

    from .conftest import EXAMPLE, FAST

    shutil.copyfile(EXAMPLE / "lds.npz", tmp_path / "lds.npz")
    toml = tmp_path / "run.toml"
    toml.write_text(FAST.replace("per_epsilon_s = 150", "per_epsilon_s = 0.001"))
    cfg = with_options(load_config(toml), **options)
    return certify_run(cfg, toml, tmp_path / "out")


def test_parameters_are_the_hashed_config_files_but_for_the_command_line_options(tmp_path):
    """Every key the command line does not set is held to the hashed config file: a search setting
    rewritten in ``parameters`` (here ``verifier.closure_splits``, ``data.bootstrap_horizon``) fails
    verification naming the key, though the verdict's own checks would all pass."""
    run = _config_run(tmp_path, seed=7, epsilon="0.2sigma", time_limit=0.002)
    cert = run.certificate
    assert cert.parameters["seed"] == 7 and cert.parameters["limits"]["per_epsilon_s"] == 0.002
    report = check(cert, Evidence(run.path))
    assert report.ok, report.failed
    (line,) = [c for c in report.checks if c.name == "parameters"]
    assert line.ok and line.detail == "equal to the recomputed value"
    for section, key, value in (
        ("verifier", "closure_splits", 3),
        ("data", "bootstrap_horizon", 61),
    ):
        params = json.loads(json.dumps(cert.parameters))
        assert params[section][key] != value
        params[section][key] = value
        forged = cert.model_copy(update={"parameters": params})
        failed = check(forged, Evidence(run.path)).failed
        assert [c.name for c in failed] == [f"parameters.{section}.{key}"], failed


def test_a_run_without_a_config_file_says_its_parameters_are_the_record(unknown_run):
    report = check(read_certificate(unknown_run), Evidence(unknown_run))
    (line,) = [c for c in report.checks if c.name == "parameters"]
    assert line.ok and "no config file recorded" in line.detail
