"""The Python front door on real runs: every function of :mod:`safecert.api` returns the typed
certificate it wrote, and ``verify`` re-derives it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import safecert
from safecert.certificate import (
    BlackboxCertificate,
    BnnCertificate,
    SequentialCertificate,
    ShieldCertificate,
)
from safecert.errors import ConfigError, DataError

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"

SB3_RUN = {
    "policy": "sb3:vendors/ppo_cartpole.zip",
    "env": "CartPole-v1",
    "episodes": 12,
    "seed": 4,
    "max_steps": 60,
    "batch_size": 4,
    "spec": {"cost": "abs(obs[0]) > 1.0", "goal": "not terminated", "budget": 30.0, "p_star": 0.5},
    "kpis": {"return": {"lower": 0.0, "upper": 60.0}},
    "envelope": {
        "obs_noise": {"kind": "gaussian", "levels": [0.0, 0.05]},
        "obs_ranges": [[-2.4, 2.4], [-3.0, 3.0], [-0.21, 0.21], [-3.5, 3.5]],
    },
}


def test_import_is_lazy_and_exports_the_api():
    code = (
        "import sys, safecert; heavy = [m for m in ('numpy', 'torch', 'gymnasium', 'pydantic',"
        " 'safecert.api') if m in sys.modules]; print(heavy, sorted(safecert.__all__))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("[] ")
    names = ("certify_blackbox", "synthesize_shield", "certify_shield", "plan_shield", "count_logs")
    for name in (*names, "verify_bnn", "verify"):
        assert name in out.stdout and callable(getattr(safecert, name))
    with pytest.raises(AttributeError):
        safecert.no_such_function  # noqa: B018


def test_certify_blackbox_from_a_dict_with_an_sb3_zip(tmp_path):
    out = tmp_path / "run"
    cert = safecert.certify_blackbox(SB3_RUN, out, base_dir=EXAMPLES, workers=1)
    assert isinstance(cert, BlackboxCertificate)
    assert cert == safecert.load_certificate(out / "certificate.json")
    assert (out / "config.toml").is_file() and (out / "report.html").is_file()
    assert cert.inputs.root == str(EXAMPLES)
    assert cert.parameters["policy"] == SB3_RUN["policy"] and cert.parameters["episodes"] == 12
    report = safecert.verify(out / "certificate.json", resimulate=3)
    assert report.ok, [c for c in report.checks if not c.ok]
    # the same config as a file gives the same evidence (rows digest) and result
    again = safecert.certify_blackbox(out / "config.toml", tmp_path / "b", base_dir=EXAMPLES)
    assert again.result == cert.result and again.inputs.evidence[0].sha256 == (
        cert.inputs.evidence[0].sha256
    )


def test_certify_blackbox_from_a_run_config_sequential(tmp_path):
    from safecert.blackbox.config import RunConfig

    config = RunConfig.model_validate(
        {**SB3_RUN, "episodes": 40, "sequential": {"method": "betting"}}
    )
    cert = safecert.certify_blackbox(config, tmp_path / "seq", base_dir=EXAMPLES, report=False)
    assert isinstance(cert, SequentialCertificate)
    assert not (tmp_path / "seq" / "report.html").exists()
    assert safecert.verify(tmp_path / "seq" / "certificate.json").ok


def test_a_bad_dict_names_the_parameter_and_writes_nothing(tmp_path):
    with pytest.raises(ConfigError, match=r"^spec\.p_star: ") as err:
        safecert.certify_blackbox(
            {**SB3_RUN, "spec": {**SB3_RUN["spec"], "p_star": 2}}, tmp_path / "x"
        )
    assert "\n" not in str(err.value) and not (tmp_path / "x").exists()


def test_shield_synthesize_then_certify(tmp_path):
    model, logs = EXAMPLES / "shield" / "grid.toml", EXAMPLES / "shield" / "grid_logs.jsonl"
    made = safecert.synthesize_shield(model, logs, epsilon=0.2, out=tmp_path / "syn")
    assert isinstance(made, ShieldCertificate) and made.verdict == "PASS"
    assert made.result.bound <= 0.2 and (tmp_path / "syn" / "report.html").is_file()
    checked = safecert.certify_shield(
        model, logs, shield=tmp_path / "syn" / "shield.json", epsilon=0.2, out=tmp_path / "cert"
    )
    assert checked.result.bound == pytest.approx(made.result.bound, abs=1e-12)
    for run in ("syn", "cert"):
        assert safecert.verify(tmp_path / run / "certificate.json", logs=logs).ok
    with pytest.raises(ConfigError, match=r"^epsilon: "):
        safecert.certify_shield(model, logs, epsilon=2.0, out=tmp_path / "bad")


def test_shield_count_tables_plan_and_anytime_certificate(tmp_path):
    """count_logs → certify_shield(counts=…) gives the bound certify gives on the logs themselves
    (anytime sets both), verify re-sums the table, and plan_shield's bound_now is that bound."""
    model, logs = EXAMPLES / "shield" / "grid.toml", EXAMPLES / "shield" / "grid_logs.jsonl"
    table = safecert.count_logs(model, [logs], tmp_path / "grid.parquet")
    assert table.steps > 0 and (tmp_path / "grid.parquet").is_file()
    from_counts = safecert.certify_shield(
        model,
        None,
        counts=[tmp_path / "grid.parquet"],
        anytime=True,
        out=tmp_path / "c",
        report=False,
    )
    from_logs = safecert.certify_shield(model, logs, anytime=True, out=tmp_path / "l", report=False)
    assert from_counts.result.bound == from_logs.result.bound
    assert safecert.verify(tmp_path / "c" / "certificate.json").ok
    plan = safecert.plan_shield(model, logs, epsilon=0.05, anytime=True)
    assert plan.bound_now == from_logs.result.bound and plan.confidence == "anytime"


def test_verify_bnn_from_a_dict(tmp_path):
    import tomllib

    system = EXAMPLES / "bnn" / "double_integrator"
    config = tomllib.loads((system / "double_integrator.toml").read_text())
    config.update(policy=str(system / "policy.onnx"), epsilon="0.1sigma")
    cert = safecert.verify_bnn(config, tmp_path / "di")
    assert isinstance(cert, BnnCertificate) and cert.verdict == "SAFE"
    assert (tmp_path / "di" / "report.html").is_file()
    assert safecert.verify(tmp_path / "di" / "certificate.json").ok
    with pytest.raises(ConfigError, match="exactly one of config and benchmark"):
        safecert.verify_bnn(None, tmp_path / "none")


def test_a_missing_extra_is_named_before_anything_is_written(tmp_path, monkeypatch):
    from safecert.extras import MissingExtraError

    monkeypatch.setattr("safecert.extras.installed", lambda module: module != "matplotlib")
    model, logs = EXAMPLES / "shield" / "grid.toml", EXAMPLES / "shield" / "grid_logs.jsonl"
    with pytest.raises(MissingExtraError, match=r"safecert\[shield\]"):
        safecert.synthesize_shield(model, logs, epsilon=0.2, out=tmp_path / "syn")
    assert not (tmp_path / "syn").exists()


def test_load_certificate_and_verify_refuse_garbage(tmp_path):
    bad = tmp_path / "certificate.json"
    bad.write_text('{"kind": "blackbox"}')
    with pytest.raises(DataError):
        safecert.load_certificate(bad)
    with pytest.raises(ConfigError, match="^resimulate: "):
        safecert.verify(bad, resimulate=-1)


def _toml_values():
    from hypothesis import strategies as st

    keys = st.text(min_size=1, max_size=8)
    scalars = (
        st.booleans()
        | st.integers(min_value=-(2**63), max_value=2**63 - 1)
        | st.floats(allow_nan=False)
        | st.text(max_size=12)
    )
    values = st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=3),
        max_leaves=12,
    )
    return st.dictionaries(keys, values, max_size=5)


def test_dump_toml_round_trips():
    """A config given as a dictionary is written as TOML and read back unchanged."""
    import tomllib

    from hypothesis import given, settings

    from safecert.config import dump_toml

    @settings(max_examples=300, deadline=None)
    @given(_toml_values())
    def check(data):
        assert tomllib.loads(dump_toml(data)) == data

    check()
