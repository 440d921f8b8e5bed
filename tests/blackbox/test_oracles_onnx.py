"""onnx: oracle on real ONNX files: a fresh torch export and the bundled vendor policies.

These test the oracle class itself, so they run it in process (``trust = "in-process"``); the
policy worker that runs it by default is tests/blackbox/test_onnx_worker.py's."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from safecert.blackbox.oracles import OracleFailure, make_oracle, parse_oracle_spec
from safecert.errors import OracleError

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.onnx legacy exporter
VENDORS = Path(__file__).resolve().parents[2] / "examples" / "vendors"


def mlp(d_in: int, d_out: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(d_in, 16), torch.nn.Tanh(), torch.nn.Linear(16, d_out), torch.nn.Tanh()
    )


def export(net: torch.nn.Module, d_in: int, path: Path) -> Path:
    torch.onnx.export(
        net,
        (torch.zeros(1, d_in),),
        str(path),
        input_names=["obs"],
        output_names=["act"],
        dynamic_axes={"obs": {0: "batch"}, "act": {0: "batch"}},
        dynamo=False,
    )
    return path


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[torch.nn.Module, Path]:
    """One small torch MLP (5 -> 3) and its ONNX export."""
    net = mlp(5, 3)
    return net, export(net, 5, tmp_path_factory.mktemp("onnx") / "m.onnx")


def test_round_trip_matches_torch(exported):
    net, path = exported
    spec = pickle.loads(
        pickle.dumps(
            parse_oracle_spec(f"onnx:{path.name}", base_dir=path.parent, trust="in-process")
        )
    )
    oracle = make_oracle(spec)
    oracle.probe()
    obs = np.random.default_rng(0).normal(size=(64, 5))
    with torch.no_grad():
        expected = net(torch.as_tensor(obs, dtype=torch.float32)).numpy()
    got = oracle.act(obs)
    assert got.dtype == np.float64 and got.shape == (64, 3)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["cheetah_fast", "cheetah_safe"])
def test_bundled_vendor_policies_match_their_torch_weights(name):
    path = VENDORS / f"{name}.onnx"
    assert path.stat().st_size < 1_000_000
    net = mlp(17, 6)
    net.load_state_dict(torch.load(VENDORS / f"{name}.pt", weights_only=True))
    obs = np.random.default_rng(1).normal(size=(32, 17))
    with torch.no_grad():
        expected = net(torch.as_tensor(obs, dtype=torch.float32)).numpy()
    oracle = make_oracle(parse_oracle_spec(f"onnx:{path}", base_dir=VENDORS, trust="in-process"))
    np.testing.assert_allclose(oracle.act(obs), expected, rtol=1e-5, atol=1e-6)


def test_wrong_input_width_is_a_failure(exported):
    oracle = make_oracle(
        parse_oracle_spec(f"onnx:{exported[1]}", base_dir=exported[1].parent, trust="in-process")
    )
    with pytest.raises(OracleFailure, match="onnxruntime"):
        oracle.act(np.zeros((2, 4)))


def test_corrupt_model_fails_the_probe(tmp_path):
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    with pytest.raises(OracleError, match="^policy: cannot load ONNX model"):
        make_oracle(
            parse_oracle_spec("onnx:bad.onnx", base_dir=tmp_path, trust="in-process")
        ).probe()


class _TwoInputs(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.tanh(a + b)


def _reasons(results: object) -> object:
    """A step's results with each failure as its reason (OracleFailure has no equality)."""
    if isinstance(results, list):
        return [r.reason if isinstance(r, OracleFailure) else r for r in results]
    return results


def test_the_session_runs_below_its_wrapper_with_the_same_outputs_and_errors(exported, tmp_path):
    """``session_run``: the compiled session's ``run`` for a one-input model on the CPU
    provider, ``InferenceSession.run`` otherwise; the same actions and the same failure
    reasons as the wrapper gives, for good rows and rows of the wrong width."""
    spec = parse_oracle_spec(f"onnx:{exported[1]}", base_dir=exported[1].parent, trust="in-process")
    below, wrapped = make_oracle(spec), make_oracle(spec)
    below.probe()
    wrapped.probe()
    session = below._session
    assert below._run == session._sess.run
    wrapped._run = wrapped._session.run  # what every call went through before
    obs = np.random.default_rng(2).normal(size=(9, 5))
    assert below.act(obs).tobytes() == wrapped.act(obs).tobytes()
    reasons = []
    for oracle in (below, wrapped):
        with pytest.raises(OracleFailure, match="^onnxruntime: ") as failure:
            oracle.act(np.zeros((2, 4)))
        reasons.append(failure.value.reason)
    assert reasons[0] == reasons[1]
    two = export_two(tmp_path / "two.onnx")
    two_inputs = make_oracle(
        parse_oracle_spec(f"onnx:{two}", base_dir=tmp_path, trust="in-process")
    )
    two_inputs.load()
    assert two_inputs._run == two_inputs._session.run  # the wrapper names the missing input
    with pytest.raises(OracleFailure, match="Required inputs"):
        two_inputs.act(np.zeros((1, 3)))


def export_two(path: Path) -> Path:
    zeros = torch.zeros(1, 3)
    torch.onnx.export(_TwoInputs(), (zeros, zeros), str(path), input_names=["a", "b"], dynamo=False)
    return path


@pytest.mark.parametrize("rows", [1, 2, 5, 7])
@pytest.mark.parametrize("size", [1, 2, 3])
def test_a_steps_calls_are_each_call_of_act(exported, rows, size):
    """``act_calls`` (the float32 conversion once a step) gives what calling ``act`` once per
    ``size`` rows gives, bit for bit, failures included."""
    from safecert.blackbox.oracles import lockstep_calls
    from safecert.blackbox.oracles.base import each_call

    oracle = make_oracle(
        parse_oracle_spec(f"onnx:{exported[1]}", base_dir=exported[1].parent, trust="in-process")
    )
    calls = lockstep_calls(oracle)
    assert calls == oracle.act_calls
    obs = np.random.default_rng(rows * 10 + size).normal(size=(rows, 5))
    got, expected = calls(obs, size), each_call(oracle.act, obs, size)
    assert type(got) is type(expected)
    if isinstance(got, np.ndarray):
        assert got.dtype == expected.dtype and got.tobytes() == expected.tobytes()
    bad = np.zeros((rows, 4))
    assert _reasons(calls(bad, size)) == _reasons(each_call(oracle.act, bad, size))
