"""Forged shield certificates: every edit of a claim or its evidence makes `safecert verify` exit 1.

A real `safecert shield synthesize` (and `certify`) run on the bundled 7x7 grid, in a folder of its
own so that every input lies under ``inputs.root``; each forgery edits a copy of that folder and
verifies it with ``--inputs COPY`` through the real CLI, while the untouched copy verifies
(exit 0). Malformed certificates are exit 2 with one line on stderr.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from safecert.canonical import canonical_json
from safecert.certificate import sha256_file
from safecert.cli.main import main
from safecert.shield.guard import Guard
from safecert.shield.model import load_model
from safecert.shield.report import allowed_from_json
from tests.conftest import run_cli

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "shield"
EPSILON = "0.2"


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """``grid.toml``, ``logs.jsonl``, ``synth/`` (the real command: synthesize, ε = 0.2, additive)
    and ``bound/`` (certify of the full shield without ε, in-process), both run in this folder."""
    root = tmp_path_factory.mktemp("forgery")
    shutil.copyfile(EXAMPLES / "grid.toml", root / "grid.toml")
    shutil.copyfile(EXAMPLES / "grid_logs.jsonl", root / "logs.jsonl")
    common = ["--model", "grid.toml", "--logs", "logs.jsonl", "--json"]
    res = run_cli("shield", "synthesize", *common, "--epsilon", EPSILON, "--method", "additive",
                  "--out", "synth", cwd=root)  # fmt: skip
    assert res.code == 0, res.stderr
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        assert main(["shield", "certify", *common, "--out", "bound"]) == 0
    return root


def _verify(capsys, cert: Path, *extra: str) -> tuple[int, dict[str, str], str]:
    """`safecert verify CERT --json` in-process: exit code, failed checks {name: detail}, stderr."""
    code = main(["verify", str(cert), "--json", *extra])
    out = capsys.readouterr()
    failed = {}
    if code in (0, 1):
        failed = {c["name"]: c["detail"] for c in json.loads(out.out)["checks"] if not c["ok"]}
    return code, failed, out.err


Edit = Callable[[dict, Path], None]


def _forge(base: Path, tmp_path: Path, edit: Edit, run: str = "synth") -> Path:
    """A copy of the whole folder; ``edit(certificate, run folder)`` changes the certificate (a
    dict, written back) and/or files. Returns the copy's certificate path."""
    copy = tmp_path / "copy"
    shutil.copytree(base, copy)
    path = copy / run / "certificate.json"
    cert = json.loads(path.read_text())
    edit(cert, copy / run)
    path.write_text(json.dumps(cert))
    return path


def _set(*keys_and_value):
    *keys, value = keys_and_value

    def edit(cert, _run):
        target = cert
        for k in keys[:-1]:
            target = target[k]
        target[keys[-1]] = value

    return edit


def _epsilon(value):
    def edit(cert, _run):
        cert["parameters"]["epsilon"] = value
        cert["result"]["epsilon"] = value

    return edit


def _halve_bound(cert, _run):
    cert["result"]["bound"] /= 2


def _model_copy_horizon(cert, run):
    text = (run / "model.toml").read_text()
    assert "horizon = 16\n" in text
    (run / "model.toml").write_text(text.replace("horizon = 16\n", "horizon = 8\n"))


def _model_copy_horizon_rehashed(cert, run):
    """A careful forger: edits the model copy and the recorded digest of the copy and the result."""
    _model_copy_horizon(cert, run)
    for e in cert["inputs"]["evidence"]:
        if e["role"] == "model-copy":
            e["sha256"] = sha256_file(run / "model.toml")
    cert["result"]["horizon"] = 8


def _truncate_logs(cert, run):
    logs = run.parent / "logs.jsonl"
    lines = logs.read_text().splitlines()
    logs.write_text("\n".join(lines[:-16]) + "\n")


def _drop_state(cert, run):
    table = json.loads((run / "shield.json").read_text())
    del table["r1c4"]
    (run / "shield.json").write_text(json.dumps(table))


def _add_action_consistently(cert, run):
    """Re-permit a forbidden move in shield.json and result.allowed, and re-hash shield.json:
    only re-deriving the result can catch this."""
    table = json.loads((run / "shield.json").read_text())
    table["r1c3"] = ["up", "down", "left", "right", "halt"]
    (run / "shield.json").write_text(canonical_json(table))
    cert["result"]["allowed"]["r1c3"] = table["r1c3"]
    for e in cert["inputs"]["evidence"]:
        if e["role"] == "shield":
            e["sha256"] = sha256_file(run / "shield.json")


SYNTH = "shield.json = synthesize("

FORGERIES: list[tuple[str, Edit, set[str]]] = [
    ("result.horizon 16 -> 1000", _set("result", "horizon", 1000), {"result.horizon"}),
    ("result.delta 0.05 -> 0.001", _set("result", "delta", 0.001), {"result.delta"}),
    ("bound halved", _halve_bound, {"result.bound"}),
    ("verdict flipped", _set("verdict", "FAIL"), {"verdict"}),
    ("a seed added", _set("seed", 7), {"seed (a shield certificate draws nothing at random)"}),
    ("epsilon looser in parameters and result", _epsilon(0.25), {SYNTH}),
    ("epsilon tighter in parameters and result", _epsilon(0.1), {SYNTH, "verdict"}),
    # a changed file ends verify at its digest, before anything is re-derived from it
    ("model copy: horizon 16 -> 8", _model_copy_horizon, {"model-copy sha256 (model.toml)"}),
    ("model copy re-hashed", _model_copy_horizon_rehashed,
     {"model copy sha256 = model sha256", "result.bound"}),
    ("logs truncated", _truncate_logs, {"logs sha256"}),
    ("state dropped from shield.json", _drop_state, {"shield sha256 (shield.json)"}),
    ("action added to shield.json and result.allowed", _add_action_consistently,
     {SYNTH, "result.forbidden_fraction", "result.bound"}),
]  # fmt: skip


def _names(failed: dict[str, str]) -> set[str]:
    """Failed check names, with the per-path digest and synthesis names shortened."""
    out = set()
    for name in failed:
        if name.startswith(SYNTH):
            name = SYNTH
        elif name.startswith("logs sha256"):
            name = "logs sha256"
        out.add(name)
    return out


def test_untouched_certificates_verify(base, tmp_path, capsys):
    res = run_cli("verify", str(base / "synth" / "certificate.json"))
    assert res.code == 0, res.stdout + res.stderr
    assert "VERIFIED shield PASS" in res.stdout
    assert _verify(capsys, base / "bound" / "certificate.json") == (0, {}, "")
    for run in ("synth", "bound"):  # a moved copy, its inputs found through --inputs
        cert = _forge(base, tmp_path / run, lambda c, r: None, run=run)
        assert _verify(capsys, cert, "--inputs", str(cert.parents[1])) == (0, {}, "")


@pytest.mark.parametrize(
    ("edit", "expected"), [f[1:] for f in FORGERIES], ids=[f[0] for f in FORGERIES]
)
def test_forgery_is_caught(base, tmp_path, capsys, edit, expected):
    cert = _forge(base, tmp_path, edit)
    code, failed, err = _verify(capsys, cert, "--inputs", str(cert.parents[1]))
    assert code == 1, (failed, err)
    assert expected <= _names(failed), sorted(failed)
    if all(" sha256 (" in name for name in expected):  # digests first: nothing else is checked
        assert all("sha256" in name for name in failed), sorted(failed)


def test_forged_field_names_both_values(base, tmp_path, capsys):
    cert = _forge(base, tmp_path, _set("result", "horizon", 1000))
    _, failed, _ = _verify(capsys, cert, "--inputs", str(cert.parents[1]))
    assert failed == {"result.horizon": "recomputed 16, certificate 1000"}


def test_careful_forger_passes_the_digests_but_not_the_rederivation(base, tmp_path, capsys):
    cert = _forge(base, tmp_path, _add_action_consistently)
    _, failed, _ = _verify(capsys, cert, "--inputs", str(cert.parents[1]))
    assert not any("sha256" in name for name in failed), failed
    assert "result.allowed" not in failed  # consistent with shield.json ...
    assert "result.forbidden_fraction" in failed  # ... but not with what it implies


def test_certify_without_epsilon_is_bound(base, tmp_path, capsys):
    cert = json.loads((base / "bound" / "certificate.json").read_text())
    assert cert["verdict"] == "BOUND"
    assert cert["parameters"] == {"command": "certify", "epsilon": None, "anytime": False}
    assert cert["result"]["epsilon"] is None and cert["result"]["method"] == "given"
    assert cert["result"]["bound"] > 0.9  # the full shield: nothing claimed about it
    # a BOUND certificate cannot be turned into a claim
    for edit in (_set("verdict", "PASS"), _epsilon(1.0)):
        forged = _forge(base, tmp_path / str(id(edit)), edit, run="bound")
        code, failed, _ = _verify(capsys, forged, "--inputs", str(forged.parents[1]))
        assert code == 1 and failed, failed


def test_missing_state_is_halt_only(base, tmp_path, capsys):
    """`certify --shield` with a state left out certifies it halt-only, exactly as the explicit
    halt-only shield and as the runtime guard treat it (not as fully permitted)."""
    table = json.loads((base / "synth" / "shield.json").read_text())
    partial = {k: v for k, v in table.items() if k != "r1c4"}
    shields = {
        "partial": partial,
        "halt_only": {**partial, "r1c4": ["halt"]},
        "full_r1c4": {**partial, "r1c4": ["up", "down", "left", "right", "halt"]},
    }
    certs = {}
    for name, shield in shields.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(shield))
        code = main(["shield", "certify", "--model", str(EXAMPLES / "grid.toml"),
                     "--logs", str(EXAMPLES / "grid_logs.jsonl"),
                     "--shield", str(tmp_path / f"{name}.json"),
                     "--out", str(tmp_path / name), "--json"])  # fmt: skip
        assert code == 0
        printed = json.loads(capsys.readouterr().out)
        assert printed["halt_only_not_listed"] == (["r1c4"] if name == "partial" else [])
        certs[name] = json.loads((tmp_path / name / "certificate.json").read_text())
    got, explicit = certs["partial"]["result"], certs["halt_only"]["result"]
    assert got["allowed"]["r1c4"] == ["halt"]
    assert len(got["allowed"]) == 40  # the certificate records the complete shield
    assert json.loads((tmp_path / "partial" / "shield.json").read_text()) == got["allowed"]
    assert got == explicit  # bound, values, allowed ... all identical
    assert got["bound"] < certs["full_r1c4"]["result"]["bound"] - 0.1
    code, failed, _ = _verify(capsys, tmp_path / "partial" / "certificate.json")
    assert code == 0, failed
    # one meaning everywhere: the guard and the shield reader agree
    model = load_model(EXAMPLES / "grid.toml")
    guard = Guard(partial, lambda: "r1c4", actions=model.actions)
    assert guard.permitted() == {"halt"} and not guard.check("up").allowed
    r1c4 = model.labels.index("r1c4")
    assert allowed_from_json(model, partial)[r1c4].tolist() == [False] * 4 + [True]


MALFORMED = [
    ("result field deleted", lambda c, r: c["result"].pop("horizon"), "certificate.result.horizon"),
    ("number as string", _set("result", "bound", "0.19"), "certificate.result.bound"),
    ("int as float", lambda c, r: c["result"]["rows"][0].update(n0=5.0), "n0"),
    ("parameter deleted", lambda c, r: c["parameters"].pop("epsilon"),
     "certificate.parameters.epsilon"),
    ("evidence entry deleted", lambda c, r: c["inputs"]["evidence"].pop(),
     "certificate.inputs.evidence"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("edit", "field"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED]
)
def test_malformed_certificate_is_exit_2(base, tmp_path, capsys, edit, field):
    cert = _forge(base, tmp_path, edit)
    code, _, err = _verify(capsys, cert, "--inputs", str(cert.parents[1]))
    assert code == 2, err
    assert field in err and err.count("\n") == 1 and "Traceback" not in err


def test_malformed_certificate_real_command(base, tmp_path):
    cert = _forge(base, tmp_path, lambda c, r: c["result"].pop("delta"))
    res = run_cli("verify", str(cert), "--inputs", str(cert.parents[1]))
    assert res.code == 2
    assert "certificate.result.delta" in res.stderr and res.stderr.count("\n") == 1
    assert "Traceback" not in res.stderr
