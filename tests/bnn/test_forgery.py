"""Forged bnn certificates: every edit that would claim more than was proved fails ``safecert verify``.

Each test copies a real run folder (the shared certified LDS run at 0.1σ, or a real run cut off
as UNKNOWN), edits the copy as a forger would, and runs ``safecert verify`` on it: the untouched
copy exits 0, every forgery exits 1 and names what it found, a malformed certificate exits 2 with
one line on stderr.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from safecert.bnn.certify import POLICY_FILE, epsilon_record
from safecert.bnn.networks import ReluNetwork
from safecert.bnn.sampling import acceptance_probability
from safecert.bnn.spec import BayesianSpec, Epsilon
from tests.conftest import run_cli

Edit = Callable[[dict[str, Any], Path], None]


def _copy(cert: Path, tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    shutil.copytree(cert.parent, folder)
    return folder / cert.name


def _edit(cert: Path, edit: Edit) -> None:
    data = json.loads(cert.read_text())
    edit(data, cert.parent)
    cert.write_text(json.dumps(data))


def _verify(cert: Path, capsys) -> tuple[int, set[str], str]:
    """``safecert verify CERT --json`` in-process: exit code, failed check names, stderr."""
    from safecert.cli.main import main

    capsys.readouterr()
    code = main(["verify", str(cert), "--json"])
    out = capsys.readouterr()
    failed = {c["name"] for c in json.loads(out.out)["checks"] if not c["ok"]} if out.out else set()
    return code, failed, out.err


@pytest.fixture
def safe_cert(lds_run, tmp_path) -> Path:
    assert lds_run.result.code == 0, lds_run.result.stderr
    return _copy(lds_run.certificate, tmp_path, "safe")


@pytest.fixture
def unknown_cert(unknown_run, tmp_path) -> Path:
    return _copy(unknown_run, tmp_path, "unknown")


def test_untouched_copies_verify(safe_cert, unknown_cert, capsys):
    res = run_cli("verify", str(safe_cert), "--json")  # the real command, in a subprocess
    assert res.code == 0, res.stdout + res.stderr
    assert res.json()["ok"]
    assert _verify(unknown_cert, capsys)[:2] == (0, set())


# ---- forgeries of the certified run (0.1σ, σ = 0.1 on the second layer) ------------------------
LDS_SPEC = BayesianSpec((0.0, 0.1), (False, True))


def _relabel_sigma(data: dict[str, Any], _: Path) -> None:
    data["result"]["epsilon"]["sigma"] = 2.0


def _relabel_epsilon(data: dict[str, Any], _: Path) -> None:
    """0.1σ → 2σ consistently across the ε record (value, ε/σ, absolute half-widths)."""
    data["result"]["epsilon"] = epsilon_record(Epsilon(2.0, True), LDS_SPEC).model_dump()


def _acceptance(data: dict[str, Any], _: Path) -> None:
    data["result"]["acceptance_probability"] *= 1e6


def _margin(value: float) -> Edit:
    def edit(data: dict[str, Any], _: Path) -> None:
        data["result"]["verifier_margin"] = value

    return edit


def _policy_weight(_: dict[str, Any], folder: Path) -> None:
    net = ReluNetwork.from_npz(folder / POLICY_FILE)
    layers = [(np.array(w), np.array(b)) for w, b in net.layers]
    layers[1][0][0, 0] += 0.5
    (folder / POLICY_FILE).write_bytes(ReluNetwork(layers).npz_bytes())


def _policy_weight_rehashed(data: dict[str, Any], folder: Path) -> None:
    """The weight edit with the copy's recorded digest updated to match."""
    from safecert.document import sha256_file

    _policy_weight(data, folder)
    data["inputs"]["evidence"][0]["sha256"] = sha256_file(folder / POLICY_FILE)


def _bayesian_sigma(data: dict[str, Any], _: Path) -> None:
    data["parameters"]["bayesian"]["sigma"] = 0.2


def _invariant_bias(data: dict[str, Any], _: Path) -> None:
    """g + 10: Inv becomes all of B, which meets X_u."""
    data["result"]["invariant"]["layers"][-1]["b"][0] += 10.0


def _search_row(data: dict[str, Any], _: Path) -> None:
    data["result"]["search"][0]["epsilon"] = 2.0


def _seed(data: dict[str, Any], _: Path) -> None:
    data["seed"] = 7


def _larger_epsilon_everywhere(data: dict[str, Any], folder: Path) -> None:
    """A thorough forger: parameters, search rows, ε record and acceptance probability all say
    3σ, consistently; only the invariant (proved for 0.1σ) is left to betray it."""
    eps = Epsilon(3.0, True)
    data["parameters"]["search"] = {
        "enabled": True,
        "ladder": ["0.1sigma", "3sigma"],
        "bisection_steps": 0,
    }
    data["result"]["search"].append({**data["result"]["search"][0], "epsilon": 3.0})
    data["result"]["epsilon"] = epsilon_record(eps, LDS_SPEC).model_dump()
    mean = ReluNetwork.from_npz(folder / POLICY_FILE)
    data["result"]["acceptance_probability"] = acceptance_probability(
        LDS_SPEC.box(mean, eps), LDS_SPEC
    )


@pytest.mark.parametrize(
    "edit,expect",
    [
        (_relabel_sigma, {"epsilon.sigma"}),
        (_relabel_epsilon, {"epsilon.value", "epsilon.sigma", "epsilon.absolute[1]"}),
        (_acceptance, {"acceptance_probability"}),
        (_margin(1e-3), {"verifier_margin"}),
        (_margin(0.0), {"verifier_margin"}),
        (_policy_weight, {"policy-copy sha256 (policy.npz)"}),
        (_policy_weight_rehashed, {"policy-copy is the policy file"}),
        (_bayesian_sigma, {"epsilon.absolute[1]", "acceptance_probability"}),
        (_invariant_bias, {"verdict"}),
        (_search_row, {"search[0].epsilon"}),
        (_seed, {"seed"}),
        (_larger_epsilon_everywhere, {"verdict", "sampled_conditions"}),
    ],
    ids=[
        "epsilon.sigma 0.1->2",
        "epsilon 0.1sigma->2sigma consistently",
        "acceptance_probability",
        "verifier_margin 1e-3",
        "verifier_margin 0",
        "policy.npz weight",
        "policy.npz weight, digest updated",
        "parameters.bayesian.sigma",
        "invariant weights",
        "search row epsilon",
        "seed",
        "3sigma everywhere but the proof",
    ],
)
def test_forged_safe_certificate_fails(safe_cert, capsys, edit, expect):
    _edit(safe_cert, edit)
    code, failed, err = _verify(safe_cert, capsys)
    assert code == 1, err
    assert expect <= failed, failed


# ---- forgeries of an UNKNOWN run ----------------------------------------------------------------
def _flip(data: dict[str, Any], _: Path) -> None:
    data["verdict"] = "SAFE"


def _flip_thoroughly(data: dict[str, Any], _: Path) -> None:
    """SAFE everywhere it is written: verdict, the search row, reason, the three checks."""
    r = data["result"]
    data["verdict"] = "SAFE"
    r["reason"] = r["search"][0]["reason"] = "closure, initial and unsafe checks infeasible"
    r["search"][0]["verdict"] = "SAFE"
    r["checks"] = {c: "infeasible" for c in ("closure", "initial", "unsafe")}


@pytest.mark.parametrize("edit", [_flip, _flip_thoroughly], ids=["verdict", "everything"])
def test_unknown_flipped_to_safe_fails(unknown_cert, capsys, edit):
    _edit(unknown_cert, edit)
    code, failed, err = _verify(unknown_cert, capsys)
    assert code == 1, err
    assert "verdict" in failed


# ---- malformed certificates: exit 2, one line ---------------------------------------------------
def _delete(*keys: str) -> Edit:
    def edit(data: dict[str, Any], _: Path) -> None:
        for k in keys[:-1]:
            data = data[k]
        del data[keys[-1]]

    return edit


def _as_string(*keys: str) -> Edit:
    def edit(data: dict[str, Any], _: Path) -> None:
        for k in keys[:-1]:
            data = data[k]
        data[keys[-1]] = str(data[keys[-1]])

    return edit


@pytest.mark.parametrize(
    "edit,field",
    [
        (_delete("result", "acceptance_probability"), "certificate.result.acceptance_probability"),
        (_as_string("result", "iterations"), "certificate.result.iterations"),
        (_as_string("result", "epsilon", "value"), "certificate.result.epsilon.value"),
        (_delete("parameters", "limits", "solver_s"), "parameters.limits.solver_s"),
        (_as_string("parameters", "bayesian", "sigma"), "parameters.bayesian.sigma"),
    ],
    ids=["no acceptance_probability", "iterations '57'", "epsilon '0.1'", "no solver_s", "sigma"],
)
def test_malformed_certificate_is_one_line_and_exit_2(safe_cert, edit, field):
    _edit(safe_cert, edit)
    res = run_cli("verify", str(safe_cert))
    lines = res.stderr.strip().splitlines()
    assert res.code == 2, res.stdout + res.stderr
    assert len(lines) == 1 and field in lines[0] and "Traceback" not in res.stderr


# ---- a run ended by a witness: the trajectory is replayed, never trusted ------------------------
@pytest.fixture(scope="module")
def witness_run(tmp_path_factory) -> Path:
    """certificate.json of a real ``--benchmark pend_all --epsilon 1.5sigma`` run: the witness
    search ends the attempt (UNKNOWN) with a replayed trajectory into X_u."""
    out = tmp_path_factory.mktemp("bnn_witness") / "out"
    result = run_cli(
        "bnn", "verify", "--benchmark", "pend_all", "--epsilon", "1.5sigma", "--out", str(out)
    )
    assert result.code == 1, result.stderr
    return out / "certificate.json"


def _first_bayesian_weight(delta: float) -> Edit:
    def edit(data: dict[str, Any], _: Path) -> None:
        data["result"]["search"][0]["witness"]["weights"][0][1]["W"][0][0] += delta

    return edit


def _start_outside_x0(data: dict[str, Any], _: Path) -> None:
    data["result"]["search"][0]["witness"]["x0"][1] = 0.2 + 1e-9  # X0 has θ̇ ≤ 0.2


def _truncated(data: dict[str, Any], _: Path) -> None:
    data["result"]["search"][0]["witness"]["weights"].pop()


def _layer_dropped(data: dict[str, Any], _: Path) -> None:
    data["result"]["search"][0]["witness"]["weights"][2].pop()


def _witness_dropped(data: dict[str, Any], _: Path) -> None:
    data["result"]["search"][0]["witness"] = None


def _reason_edited(data: dict[str, Any], _: Path) -> None:
    r = data["result"]
    r["search"][0]["reason"] = r["reason"] = r["reason"].replace("in 7 steps", "in 3 steps")


def test_witness_run_verifies(witness_run, tmp_path, capsys):
    cert = _copy(witness_run, tmp_path, "witness")
    data = json.loads(cert.read_text())
    row = data["result"]["search"][0]
    assert row["reason"].startswith("no positive invariant exists") and row["witness"] is not None
    assert len(row["witness"]["weights"]) == 7 and "in 7 steps" in row["reason"]
    code, failed, err = _verify(cert, capsys)
    assert code == 0 and not failed, (failed, err)


@pytest.mark.parametrize(
    "edit,expect",
    [
        (_first_bayesian_weight(1.0), {"search[0].witness"}),  # far outside the 1.5σ box
        (_start_outside_x0, {"search[0].witness"}),
        (_truncated, {"search[0].witness"}),
        (_layer_dropped, {"search[0].witness"}),
        (_witness_dropped, {"search[0].witness"}),
        (_reason_edited, {"search[0].witness (reason)"}),
    ],
    ids=[
        "weight outside the box",
        "start outside X0",
        "cut short",
        "a layer missing",
        "dropped",
        "reason edited",
    ],
)
def test_forged_witness_fails(witness_run, tmp_path, capsys, edit, expect):
    cert = _copy(witness_run, tmp_path, "forged")
    _edit(cert, edit)
    code, failed, err = _verify(cert, capsys)
    assert code == 1, err
    assert expect <= failed, failed


def test_ragged_witness_weights_are_one_line_exit_2(witness_run, tmp_path, capsys):
    cert = _copy(witness_run, tmp_path, "ragged")

    def ragged(data: dict[str, Any], _: Path) -> None:
        data["result"]["search"][0]["witness"]["weights"][0][1]["W"][0] = [1.0]

    _edit(cert, ragged)
    code, failed, err = _verify(cert, capsys)
    assert code == 2 and not failed
    assert err.count("\n") == 1 and "search[0].witness.weights[0]" in err
