"""A user's own system end to end: the double integrator written only in TOML, its trained ONNX
policy, `safecert bnn verify` → SAFE, `safecert verify` re-proving from the embedded system with
the other solver; and the policy formats (.onnx, torch state_dict) checked against their runtimes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from safecert.bnn.networks import ReluNetwork, read_policy_file
from safecert.errors import ConfigError, DataError
from tests.conftest import run_cli

DI = Path(__file__).resolve().parents[2] / "examples" / "bnn" / "double_integrator"


@pytest.fixture(scope="module")
def di_run(tmp_path_factory) -> Path:
    """The shipped example at ε = 0.1σ (a real subprocess): its output folder."""
    d = tmp_path_factory.mktemp("di")
    for f in ("double_integrator.toml", "policy.onnx"):
        shutil.copyfile(DI / f, d / f)
    res = run_cli(
        "bnn", "verify", str(d / "double_integrator.toml"), "--epsilon", "0.1sigma",
        "--out", str(d / "out"), "--json",
    )  # fmt: skip
    assert res.code == 0, res.stderr
    assert res.json()["verdict"] == "SAFE"
    return d / "out"


def test_double_integrator_certifies_safe_and_verify_reproves_it(di_run: Path) -> None:
    cert = json.loads((di_run / "certificate.json").read_text())
    assert cert["verdict"] == "SAFE" and cert["result"]["epsilon"]["value"] == 0.1
    assert cert["parameters"]["dynamics"]["next"]["v"] == "v + 0.1 * clip(u, -1, 1)"
    assert cert["parameters"]["sets"]["unsafe"]["outside"] == {"x": [-0.8, 0.8], "v": [-0.8, 0.8]}
    copy = [e for e in cert["inputs"]["evidence"] if e["role"] == "policy-copy"][0]
    assert copy["path"] == "policy.onnx"
    ok = run_cli("verify", str(di_run / "certificate.json"), "--json")
    assert ok.code == 0, ok.stdout + ok.stderr
    checks = {c["name"]: c for c in ok.json()["checks"]}
    assert checks["reproof_solver"]["ok"] and "scip" in checks["reproof_solver"]["detail"]
    assert checks["sampled_conditions"]["ok"]
    assert "100000 sampled states" in checks["sampled_conditions"]["detail"]


def test_verify_uses_the_embedded_sets(di_run: Path, tmp_path: Path) -> None:
    """Shrink the embedded X_u's complement so that it meets the invariant (not X0): the re-proof
    must fail; shrunk until it meets X0, the embedded sets are one line, exit 2."""
    bad = tmp_path / "bad"
    shutil.copytree(di_run, bad)
    cert = json.loads((bad / "certificate.json").read_text())
    cert["parameters"]["sets"]["unsafe"]["outside"] = {"x": [-0.3, 0.3], "v": [-0.3, 0.3]}
    (bad / "certificate.json").write_text(json.dumps(cert))
    res = run_cli("verify", str(bad / "certificate.json"), "--json")
    assert res.code == 1
    failed = {c["name"] for c in res.json()["checks"] if not c["ok"]}
    assert {"checks.unsafe", "verdict"} <= failed
    cert["parameters"]["sets"]["unsafe"]["outside"] = {"x": [-0.1, 0.1], "v": [-0.1, 0.1]}
    (bad / "certificate.json").write_text(json.dumps(cert))
    res = run_cli("verify", str(bad / "certificate.json"), "--json")
    assert res.code == 2 and "parameters.sets.initial: X0 overlaps X_u" in res.stderr


def test_onnx_policy_equals_onnxruntime() -> None:
    ort = pytest.importorskip("onnxruntime")
    net = read_policy_file(DI / "policy.onnx")
    x = np.random.default_rng(0).uniform(-1, 1, size=(256, 2))
    sess = ort.InferenceSession(str(DI / "policy.onnx"))
    (ref,) = sess.run(None, {"x": x.astype(np.float32)})
    np.testing.assert_allclose(net.forward(x), ref, atol=1e-5)
    assert net.widths == (2, 16, 1)


def test_torch_state_dict_policy(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(3, 5), torch.nn.ReLU(), torch.nn.Linear(5, 4), torch.nn.ReLU(),
        torch.nn.Linear(4, 2),
    ).double()  # fmt: skip
    torch.save(model.state_dict(), tmp_path / "p.pt")
    net = read_policy_file(tmp_path / "p.pt")
    x = np.random.default_rng(1).normal(size=(64, 3))
    with torch.no_grad():
        ref = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(net.forward(x), ref, rtol=1e-12, atol=1e-12)
    torch.save(model, tmp_path / "whole.pt")  # a pickled module: never unpickled with code
    with pytest.raises(DataError, match="state_dict"):
        read_policy_file(tmp_path / "whole.pt")


def test_onnx_with_another_op_is_one_line_naming_it(tmp_path: Path) -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((2, 1), dtype=np.float32), "w")
    b = numpy_helper.from_array(np.zeros(1, dtype=np.float32), "b")
    graph = helper.make_graph(
        [
            helper.make_node("Gemm", ["x", "w", "b"], ["z"]),
            helper.make_node("Sigmoid", ["z"], ["u"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("u", TensorProto.FLOAT, [1, 1])],
        [w, b],
    )
    onnx.save(helper.make_model(graph), tmp_path / "s.onnx")
    with pytest.raises(ConfigError, match="unsupported ONNX node Sigmoid") as err:
        read_policy_file(tmp_path / "s.onnx")
    assert str(err.value).startswith("policy: ")
    (tmp_path / "t.onnx").write_bytes(b"\x08\x07garbage")
    with pytest.raises(DataError, match="policy"):
        read_policy_file(tmp_path / "t.onnx")
    with pytest.raises(ConfigError, match="unknown policy format '.h5'"):
        read_policy_file(tmp_path / "p.h5")
    assert isinstance(read_policy_file(DI / "policy.onnx"), ReluNetwork)


def test_cli_export_writes_onnx_and_vnnlib(di_run: Path, tmp_path: Path) -> None:
    """`safecert bnn export` on the real certificate (the files' contents: tests/bnn/test_export)."""
    res = run_cli(
        "bnn", "export", str(di_run / "certificate.json"), "--out", str(tmp_path / "e"), "--json"
    )
    assert res.code == 0, res.stderr
    names = sorted(Path(p).name for p in res.json()["files"])
    unsafe = [f"unsafe_{k}.vnnlib" for k in range(4)]
    assert names == ["closed_loop.onnx", "closure.vnnlib", "initial_0.vnnlib", *unsafe]
    assert res.json()["verdict"] == "SAFE"
    onnx = pytest.importorskip("onnx")
    model = onnx.load(str(tmp_path / "e" / "closed_loop.onnx"))
    assert {p.key: p.value for p in model.metadata_props}["safecert.verdict"] == "SAFE"
    for name in names[1:]:
        head = (tmp_path / "e" / name).read_text().splitlines()[:4]
        assert "; safecert verdict: SAFE (the certificate claims this query UNSAT)" in head
    bad = run_cli("bnn", "export", str(tmp_path / "nope.json"), "--out", str(tmp_path / "e2"))
    assert bad.code == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_cli_export_refuses_a_non_safe_certificate_unless_forced(
    di_run: Path, tmp_path: Path
) -> None:
    """An UNKNOWN certificate claims nothing: exporting it is one line, exit 2, no file written;
    with --force every file states the verdict."""
    d = tmp_path / "unknown"
    shutil.copytree(di_run, d)
    cert = json.loads((d / "certificate.json").read_text())
    cert["verdict"] = "UNKNOWN"
    (d / "certificate.json").write_text(json.dumps(cert))
    out = tmp_path / "e"
    res = run_cli("bnn", "export", str(d / "certificate.json"), "--out", str(out))
    assert res.code == 2, res.stdout + res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "UNKNOWN" in res.stderr
    assert "--force" in res.stderr and not out.exists()
    res = run_cli("bnn", "export", str(d / "certificate.json"), "--out", str(out), "--force")
    assert res.code == 0, res.stderr
    assert "verdict is UNKNOWN" in res.stderr  # a warning, not silence
    files = sorted(out.iterdir())
    assert len(files) == 7  # closed_loop.onnx, closure, initial_0, unsafe_0…3
    onnx = pytest.importorskip("onnx")
    for f in files:
        if f.suffix == ".onnx":
            model = onnx.load(str(f))
            assert {p.key: p.value for p in model.metadata_props}["safecert.verdict"] == "UNKNOWN"
            assert "NOT SAFE" in model.doc_string
        else:
            assert "; safecert verdict: UNKNOWN (NOT SAFE: exported with --force" in f.read_text()
