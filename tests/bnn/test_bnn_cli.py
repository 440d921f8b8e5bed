from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from safecert.bnn.config import BnnConfig, bayesian_spec
from safecert.bnn.networks import load_policy
from safecert.bnn.setup import benchmark_config, load_config
from safecert.bnn.verifier import DEFAULT_MARGIN
from safecert.document import sha256_file
from safecert.errors import ConfigError
from tests.bnn.conftest import EXAMPLE, SYSTEM

LDS_X04 = (SYSTEM / "lds_x04.system.toml").read_text()


def test_verify_writes_a_safe_certificate_and_picture(lds_run):
    d, res = lds_run.folder, lds_run.result
    assert res.code == 0, res.stderr
    summary = res.json()  # stdout is exactly one JSON document (no solver banner)
    assert summary["verdict"] == "SAFE"
    cert = json.loads(lds_run.certificate.read_text())
    assert cert["kind"] == "bnn" and cert["verdict"] == "SAFE"
    r = cert["result"]
    assert r["checks"] == {"closure": "infeasible", "initial": "infeasible", "unsafe": "infeasible"}
    assert r["epsilon"]["unit"] == "sigma" and r["epsilon"]["sigma"] == 0.1
    assert r["epsilon"]["absolute"] == pytest.approx([0.0, 0.01])
    assert r["invariant"]["hidden"] == [12] and len(r["invariant"]["layers"]) == 2
    assert r["verifier_margin"] == DEFAULT_MARGIN
    assert r["runtimes_s"]["total_s"] > 0 and r["iterations"] >= 1
    assert [(s["epsilon"], s["unit"], s["verdict"]) for s in r["search"]] == [
        (0.1, "sigma", "SAFE")
    ]
    # inputs: the config and the user's policy relative to the config's folder, the copy by the
    # certificate; the copy is the user's file byte for byte
    inputs = cert["inputs"]
    assert Path(inputs["root"]) == d.resolve()
    files = {f["role"]: f for f in inputs["files"]}
    assert files["config"]["path"] == "run.toml" and files["policy"]["path"] == "lds.npz"
    assert files["config"]["sha256"] == sha256_file(d / "run.toml")
    [copy] = inputs["evidence"]
    assert copy["role"] == "policy-copy" and copy["path"] == "policy.npz"
    assert copy["sha256"] == files["policy"]["sha256"] == sha256_file(d / "out" / "policy.npz")
    assert cert["parameters"] == load_config(d / "run.toml").model_dump(mode="json")
    assert (d / "out" / "invariant.png").read_bytes()[:4] == b"\x89PNG"


def _verify_in_process(cert: Path, capsys) -> tuple[int, dict]:
    from safecert.cli.main import main

    capsys.readouterr()
    code = main(["verify", str(cert), "--json"])
    return code, json.loads(capsys.readouterr().out)


# full validation; verify passing and catching a changed invariant are also shown by
# test_forgery.py (in process) and test_custom_system.py (real `safecert verify --json`)
@pytest.mark.slow
def test_safecert_verify_rechecks_and_catches_tampering(lds_run, cli, tmp_path, capsys):
    ok = cli("verify", str(lds_run.certificate), "--json")  # real subprocess: exit 0, JSON
    assert ok.code == 0, ok.stderr
    names = {c["name"]: c["ok"] for c in ok.json()["checks"]}
    assert all(names.values())
    assert {
        "config sha256 (run.toml)",
        "policy sha256 (lds.npz)",
        "policy-copy sha256 (policy.npz)",
        "policy-copy is the policy file",
        "verifier_margin",
        "search",
        "epsilon",
        "acceptance_probability",
        "checks",
        "reproof_solver",
        "sampled_conditions",
        "verdict",
    } <= set(names)
    # a different invariant (g ≡ 1: Inv = B meets X_u) must fail the re-check
    bad = tmp_path / "bad"
    shutil.copytree(lds_run.folder / "out", bad)
    cert = json.loads((bad / "certificate.json").read_text())
    layers = cert["result"]["invariant"]["layers"]
    layers[-1]["W"] = [[0.0] for _ in layers[-1]["W"]]
    layers[-1]["b"] = [1.0]
    (bad / "certificate.json").write_text(json.dumps(cert))
    code, report = _verify_in_process(bad / "certificate.json", capsys)
    assert code == 1
    failed = {c["name"] for c in report["checks"] if not c["ok"]}
    assert {"checks.unsafe", "verdict"} <= failed
    # a different policy file breaks the hash
    other = tmp_path / "other"
    shutil.copytree(lds_run.folder / "out", other)
    load_policy("pend").save_npz(other / "policy.npz")
    code, report = _verify_in_process(other / "certificate.json", capsys)
    assert code == 1
    assert {c["name"] for c in report["checks"] if not c["ok"]} >= {
        "policy-copy sha256 (policy.npz)"
    }


@pytest.mark.parametrize(
    "args,field",
    [
        (["--benchmark", "nope"], "benchmark"),
        (["--benchmark", "lds", "--epsilon", "abc"], "epsilon"),
        (["--benchmark", "lds", "--epsilon", "1sigma", "--search"], "epsilon"),
        ([], "config"),
        (["--benchmark", "lds", "--time-limit", "-1"], "--time-limit"),
        (["--benchmark", "lane", "--workers", "0"], "--workers"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(cli, tmp_path, args, field):
    res = cli("bnn", "verify", *args, "--out", str(tmp_path / "o"))
    assert res.code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0] and "Traceback" not in res.stderr


def test_bad_config_keys_name_the_field(cli, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'policy = "missing.npz"\n{LDS_X04}')
    res = cli("bnn", "verify", str(cfg), "--out", str(tmp_path / "o"))
    assert res.code == 2 and "policy" in res.stderr and "missing.npz" in res.stderr
    cfg.write_text(f'policy = "x.npz"\n{LDS_X04}\n[limits]\nper_epsilon = 3\n')
    res = cli("bnn", "verify", str(cfg), "--out", str(tmp_path / "o"))
    assert res.code == 2 and "limits.per_epsilon" in res.stderr


def test_config_model():
    cfg = load_config(EXAMPLE / "lds.toml")
    assert isinstance(cfg, BnnConfig) and cfg.epsilon_value().in_sigma
    spec = bayesian_spec(cfg, load_policy("lds"))
    assert spec.sigma == (0.0, 0.1) and spec.bayesian_layers == (False, True)
    all_cfg = benchmark_config("car_all")
    assert all_cfg.invariant.hidden == [32]
    assert bayesian_spec(all_cfg, load_policy("car_all")).sigma == (0.0, 0.05, 0.05)
    with pytest.raises(ConfigError, match="search.ladder"):
        benchmark_config("lds", search={"ladder": ["1sigma", "0.5"]})
    with pytest.raises(ConfigError, match="bayesian.sigma"):
        bayesian_spec(benchmark_config("lds", bayesian={"sigma": [0.1]}), load_policy("lds"))
    assert np.isclose(benchmark_config("lds", epsilon=0.02).epsilon_value().value, 0.02)


def test_sign_key_signs_the_certificate(cli, tmp_path):
    """A budget spent before the first ε (instant UNKNOWN, exit 1), signed and verified."""
    from safecert.signing import generate_keypair

    key, pub = generate_keypair(tmp_path / "keys")
    cfg = tmp_path / "c.toml"
    shutil.copyfile(EXAMPLE / "lds.npz", tmp_path / "lds.npz")
    cfg.write_text(
        f'policy = "lds.npz"\n{LDS_X04}\n[search]\nenabled = true\n[limits]\ntotal_s = 1e-9\n'
    )
    out = tmp_path / "o"
    res = cli("bnn", "verify", str(cfg), "--out", str(out), "--sign-key", str(key), "--json")
    assert res.code == 1 and res.json()["verdict"] == "UNKNOWN", res.stderr
    assert (out / "certificate.json.sig").is_file()
    ok = cli("verify", str(out / "certificate.json"), "--pubkey", str(pub), "--json")
    assert ok.code == 0 and ok.json()["ok"], ok.stdout + ok.stderr
    bad = cli("bnn", "verify", str(cfg), "--out", str(out), "--sign-key", str(tmp_path / "nokey"))
    assert bad.code == 2 and "--sign-key" in bad.stderr and "Traceback" not in bad.stderr


def _one_line_exit_2(res, *needles: str) -> None:
    lines = res.stderr.strip().splitlines()
    assert res.code == 2 and len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert all(n in lines[0] for n in needles), lines[0]


def test_truncated_npz_is_one_line(cli, tmp_path):
    data = (EXAMPLE / "lds.npz").read_bytes()
    (tmp_path / "lds.npz").write_bytes(data[: len(data) // 2])
    (tmp_path / "c.toml").write_text(f'policy = "lds.npz"\n{LDS_X04}')
    res = cli("bnn", "verify", str(tmp_path / "c.toml"), "--out", str(tmp_path / "o"))
    _one_line_exit_2(res, "policy", "lds.npz")


def test_policy_that_does_not_fit_the_system_names_both_sizes(cli, tmp_path):
    car = (SYSTEM / "car.system.toml").read_text()
    shutil.copyfile(EXAMPLE / "lds.npz", tmp_path / "lds.npz")
    (tmp_path / "c.toml").write_text(f'policy = "lds.npz"\n{car}')
    res = cli("bnn", "verify", str(tmp_path / "c.toml"), "--out", str(tmp_path / "o"))
    _one_line_exit_2(res, "policy", "2 → 1", "3 → 3")
    assert not (tmp_path / "o" / "certificate.json").exists()


@pytest.mark.parametrize(
    ("old", "new", "needle"),
    [
        ('uc = "clip(u, -1, 1)"', 'uc = "clip(u, -1, 1) * x"', "product of two variables"),
        ('y = "y + 0.2 * uc"', 'y = "y + 0.2 * q"', "dynamics.next.y: unknown variable 'q'"),
        ('uc = "clip(u, -1, 1)"', 'uc = "clip(u, -1)"', "dynamics.define.uc: clip takes 3"),
        ("y = [-0.4, 0.4] } }", "y = [-0.4, 0.4], z = [0, 1] } }", "sets.initial.box.z"),
        ('action = ["u"]', 'action = ["u", "w"]', "2 → 1"),
    ],
)
def test_bad_system_tables_exit_2_naming_the_field(cli, tmp_path, old, new, needle):
    assert old in LDS_X04
    shutil.copyfile(EXAMPLE / "lds.npz", tmp_path / "lds.npz")
    (tmp_path / "c.toml").write_text(f'policy = "lds.npz"\n{LDS_X04.replace(old, new)}')
    res = cli("bnn", "verify", str(tmp_path / "c.toml"), "--out", str(tmp_path / "o"))
    _one_line_exit_2(res, needle)


@pytest.mark.parametrize(
    ("top", "table", "needle"),
    [
        ("seed = -1", "", "seed: Input should be greater than or equal to 0"),
        (
            "",
            "[invariant]\nhidden = [100000000]",
            "invariant.hidden.0: Input should be less than or equal to 4096",
        ),
        (
            "",
            "[data]\ninitial_samples = 1000000000000",
            "data.initial_samples: Input should be less than or equal to 1000000",
        ),
        ("", "[limits]\nsolver_s = inf", "limits.solver_s: Input should be a finite number"),
        ("", "[bayesian]\nsigma = nan", "bayesian.sigma"),
        ("", "[search]\nbisection_steps = 1000", "search.bisection_steps"),
    ],
)
def test_absurd_values_are_refused_at_the_door(tmp_path, top, table, needle):
    """Issue 14: non-finite and absurd sizes are one line naming the key, before any work."""
    (tmp_path / "c.toml").write_text(f'policy = "lds.npz"\n{top}\n{LDS_X04}\n{table}\n')
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "c.toml")
    assert needle in str(err.value) and "\n" not in str(err.value)
