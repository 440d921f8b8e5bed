from __future__ import annotations

import json

import numpy as np
import pytest

from safecert.bnn.config import bayesian_spec, benchmark_config, load_policy_network
from safecert.bnn.dynamics import get_benchmark
from safecert.bnn.search import BnnProblem, search_epsilon
from safecert.bnn.spec import BayesianSpec, Epsilon, parse_epsilon
from safecert.bnn.verify import (
    POLICY_FILE,
    build_certificate,
    check,
    epsilon_record,
    spec_from_record,
    spec_record,
)
from safecert.certificate import Evidence, read_certificate, sha256_file, write_certificate
from safecert.errors import DataError


def test_epsilon_record_in_sigma_and_absolute():
    spec = BayesianSpec((0.0, 0.05, 0.05), (False, True, True))
    rec = epsilon_record(parse_epsilon("1.5sigma"), spec)
    assert {k: rec[k] for k in ("value", "unit", "sigma")} == {
        "value": 1.5,
        "unit": "sigma",
        "sigma": 1.5,
    }
    assert rec["absolute"] == pytest.approx([0.0, 0.075, 0.075], abs=1e-15)
    rec = epsilon_record(parse_epsilon("0.1"), spec)
    assert rec["unit"] == "absolute" and rec["sigma"] == pytest.approx(2.0)
    mixed = BayesianSpec((0.0, 0.1, 0.05), (False, True, True))
    assert epsilon_record(Epsilon(0.1, False), mixed)["sigma"] is None
    assert spec_from_record(spec_record(spec)) == spec
    with pytest.raises(DataError, match="parameters.bayesian"):
        spec_from_record({"sigma": [0.1]})


@pytest.fixture
def unknown_cert(tmp_path):
    """A real run cut off at once: the certificate is UNKNOWN and claims nothing."""
    cfg = benchmark_config(
        "lds",
        epsilon="1sigma",
        data={"bootstrap": False, "initial_samples": 50, "unsafe_samples": 50},
        learner={"epochs": 1},
        limits={"per_epsilon_s": 0.001},
    )
    mean, _ = load_policy_network(cfg, None)
    problem = BnnProblem(get_benchmark("lds"), mean, bayesian_spec(cfg, mean), cfg)
    found = search_epsilon(lambda e, w, lim: problem.run(e, w, lim), ["1sigma"], total_time_s=60)
    mean.save_npz(tmp_path / POLICY_FILE)
    cert, shown = build_certificate(
        problem, found, policy_sha256=sha256_file(tmp_path / POLICY_FILE), config_sha256=None
    )
    path = write_certificate(cert, tmp_path / "certificate.json")
    return path, shown


def test_unknown_certificate_checks_inputs_only(unknown_cert):
    path, shown = unknown_cert
    cert = read_certificate(path)
    assert cert.verdict == "UNKNOWN" and "time limit" in cert.result["reason"]
    assert shown is not None and cert.result["checks"]["closure"] == "not reached"
    report = check(cert, Evidence(path))
    assert report.ok
    assert [c.name for c in report.checks] == ["policy_sha256", "epsilon", "verdict"]


def test_tampered_epsilon_or_missing_policy_is_caught(unknown_cert, tmp_path):
    path, _ = unknown_cert
    data = json.loads(path.read_text())
    data["result"]["epsilon"]["absolute"] = [0.0, 0.5]
    path.write_text(json.dumps(data))
    report = check(read_certificate(path), Evidence(path))
    assert not report.ok and {c.name for c in report.checks if not c.ok} == {"epsilon"}
    with pytest.raises(DataError, match="policy.npz"):
        check(read_certificate(path), Evidence(path, data_dir=tmp_path / "nowhere"))
    assert np.isfinite(data["result"]["runtimes_s"]["total_s"])
