"""Fuzzing every input format (a small, derandomized run; benchmarks/fuzz_inputs.py runs long).

Each test mutates a shipped valid example (tests/fuzz/harness.py) and asserts the contract of the
command that reads it: exit 0/1/2 only, no traceback, one line for exit 2, nothing outside the
output folder touched, no run past the limit."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from tests.fuzz import harness

SUITE = settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    database=None,
)


def fuzz(fmt: harness.Format, tmp_path: Path):
    @SUITE
    @given(case=harness.fuzz_input(fmt))
    def one(case: tuple[bytes, list[str]]) -> None:
        data, done = case
        outcome, problems = harness.run_one(fmt, data, tmp_path)
        assert not problems, f"{fmt.name} after {done}: {problems}"

    one()


def test_fuzz_blackbox_config(tmp_path):
    fuzz(harness.blackbox_format(), tmp_path)


def test_fuzz_shield_model(tmp_path):
    fuzz(harness.shield_model_format(), tmp_path)


def test_fuzz_shield_logs(tmp_path):
    fuzz(harness.logs_format(), tmp_path)


def test_fuzz_bnn_config(tmp_path):
    fmt = harness.bnn_format()
    fuzz(fmt, tmp_path)


@pytest.fixture(scope="module")
def certificate_run(tmp_path_factory) -> Path:
    return harness.make_certificate_run(tmp_path_factory.mktemp("cert"))


def test_fuzz_certificate(tmp_path, certificate_run):
    fuzz(harness.certificate_format(certificate_run), tmp_path)


def test_the_contract_catches_what_it_should(tmp_path):
    """The checker is not vacuous: an escaped exception, a two-line exit 2, a touched input."""
    ok = harness.Outcome(2, "", "safecert: error: x: bad; fix\n", "", False, 0.1)
    assert harness.check(ok, {}, {}) == []
    assert harness.check(
        harness.Outcome(None, "", "", "Traceback\nKeyError: 'x'", False, 0), {}, {}
    )
    assert harness.check(harness.Outcome(2, "", "a\nb\n", "", False, 0), {}, {})
    assert harness.check(ok, {"run.toml": "1"}, {"run.toml": "2"})
    assert harness.check(harness.Outcome(None, "", "", "", True, 60), {}, {})
