"""ONNX policies in a policy worker (``trust = "isolated"``, the default) answer bit for bit as
in process, and keep every check and every failure handling of a policy worker.

The worker receives the rollout's float64 observations as JSON (shortest round-trip form, so the
same float64 values), casts them to float32 as the in-process oracle does, and writes back the
checked float64 actions (the model's float32 outputs widened exactly) in shortest round-trip
form: the rollout must read the very bits the in-process oracle gives. Checked on the rows of a
real SafeHalfCheetahVelocity episode through every path a call can take (one call, a lockstep
step's calls in one round trip, a lone run's posted halves, several rows a call), and on a short
``certify`` run both ways (the stored episodes and the certificate's result)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from safecert.blackbox.oracles import OracleFailure, make_oracle, parse_oracle_spec
from safecert.blackbox.oracles.exec_oracle import ExecOracle
from safecert.errors import OracleError

pytest.importorskip("onnxruntime")
VENDORS = Path(__file__).resolve().parents[2] / "examples" / "vendors"
MODEL = VENDORS / "cheetah_safe.onnx"


def onnx_oracle(trust: str, model: Path = MODEL, timeout_s: float = 10.0):  # type: ignore[no-untyped-def]
    return make_oracle(
        parse_oracle_spec(f"onnx:{model}", base_dir=model.parent, trust=trust, timeout_s=timeout_s)  # type: ignore[arg-type]
    )


@pytest.fixture(scope="module")
def both():  # type: ignore[no-untyped-def]
    """The bundled HalfCheetah policy in process and in its policy worker."""
    here, worker = onnx_oracle("in-process"), onnx_oracle("isolated")
    assert not isinstance(here, ExecOracle) and isinstance(worker, ExecOracle)
    yield here, worker
    here.close()
    worker.close()


@pytest.fixture(scope="module")
def episode_rows(both) -> np.ndarray:  # type: ignore[no-untyped-def]
    """The float64 observations of one real SafeHalfCheetahVelocity episode (250 steps) driven
    by the in-process policy, with every fourth row scaled by a factor that is not a power of two
    (values far from float32's grid: each cast rounds)."""
    from safecert.envs import make_env

    here, _ = both
    env = make_env("SafeHalfCheetahVelocity-v0", {}, VENDORS)
    obs, _ = env.reset(seed=11)
    rows = []
    for _ in range(250):
        rows.append(np.asarray(obs, dtype=np.float64))
        obs, _r, term, trunc, _i = env.step(here.act(obs[None])[0])
        if term or trunc:
            break
    env.close()
    out = np.array(rows)
    out[::4] *= 1.000000123456789
    return out


def _bits(actions: object) -> bytes:
    assert isinstance(actions, np.ndarray) and actions.dtype == np.float64
    return actions.tobytes()


@pytest.mark.parametrize("size", [1, 3])
def test_a_halfcheetah_episode_s_rows_get_the_same_bits_in_the_worker(both, episode_rows, size):
    here, worker = both
    expected = _bits(here.act_calls(episode_rows, size))
    assert _bits(worker.act_calls(episode_rows, size)) == expected  # one round trip
    assert _bits(worker.post_calls(episode_rows, size)()) == expected  # a lone run's half
    for i in range(0, len(episode_rows), 37):  # lone calls (a step of one row)
        rows = episode_rows[i : i + size]
        assert _bits(worker.act(rows)) == _bits(here.act(rows))


CERTIFY = """
policy = "onnx:{model}"
env = "SafeHalfCheetahVelocity-v0"
episodes = 5
seed = 4
max_steps = 40
batch_size = {batch}
workers = 1
trust = "{trust}"
[spec]
budget = 0.5
p_star = 0.5
cost = "info:cost"
[kpis]
return = {{ lower = -100.0, upper = 100.0 }}
[envelope]
act_noise = {{ kind = "gaussian", levels = [0.0, 0.3] }}
dynamics = {{ mass = [1.0, 1.4] }}
"""

ISOLATED_RUN = """
import sys
from pathlib import Path
from safecert.blackbox.certify import certify
certify(Path(sys.argv[1]), Path(sys.argv[2]), workers=1, progress=False)
print("onnxruntime" in sys.modules)
"""


def _episodes(out: Path) -> list[tuple]:
    with sqlite3.connect(out / "episodes.sqlite") as db:
        return db.execute("SELECT * FROM episodes ORDER BY cell, idx").fetchall()


@pytest.mark.parametrize("batch", [1, 2])
def test_certify_stores_the_same_episodes_in_process_and_isolated(tmp_path, batch):
    """A short HalfCheetah certification with action noise and a mass shift, both ways: the
    same stored rows (every float exact) and the same certificate result and verdict; the
    isolated run's own process never imports onnxruntime."""
    from safecert.blackbox.certify import certify

    outs = {}
    for trust in ("in-process", "isolated"):
        config = tmp_path / f"{trust}.toml"
        config.write_text(textwrap.dedent(CERTIFY.format(model=MODEL, trust=trust, batch=batch)))
        outs[trust] = tmp_path / trust
        if trust == "in-process":
            certify(config, outs[trust], workers=1, progress=False)
            continue
        done = subprocess.run(
            [sys.executable, "-c", ISOLATED_RUN, str(config), str(outs[trust])],
            capture_output=True,
            text=True,
            check=True,
        )
        assert done.stdout.split() == ["False"]  # the judge never loaded onnxruntime
    rows = _episodes(outs["in-process"])
    assert len(rows) == 5 * 4 and rows == _episodes(outs["isolated"])
    docs = [json.loads((outs[t] / "certificate.json").read_text()) for t in outs]
    assert docs[0]["result"] == docs[1]["result"] and docs[0]["verdict"] == docs[1]["verdict"]
    evidence = [[e["sha256"] for e in d["inputs"]["evidence"]] for d in docs]
    assert evidence[0] == evidence[1]


def test_the_cli_starts_an_onnx_policy_worker_early(tmp_path):
    """``certify`` starts an isolated ONNX policy's worker beside its own imports, as it does
    for a ``python:`` policy (cli/blackbox.py ``_policy_started_early``)."""
    from safecert.cli.blackbox import _start_policy_worker

    config = tmp_path / "run.toml"
    config.write_text(textwrap.dedent(CERTIFY.format(model=MODEL, trust="isolated", batch=1)))
    started = _start_policy_worker(config)
    assert started is not None
    spec, oracle = started
    try:
        assert spec.kind == "onnx" and spec.in_worker and isinstance(oracle, ExecOracle)
        assert oracle.channel.pid not in (None, os.getpid())
    finally:
        oracle.close()
    config.write_text(textwrap.dedent(CERTIFY.format(model=MODEL, trust="in-process", batch=1)))
    assert _start_policy_worker(config) is None


# -- failures: the worker's handling covers ONNX as it covers python: ---------------------------


def _model(tmp_path: Path, name: str, op: str) -> Path:
    """A one-node ONNX model ``y = op(x)`` on float32 rows of width 17 (dynamic batch)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 17])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 17])
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"])], name, [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("trust", ["in-process", "isolated"])
def test_a_model_that_answers_nan_fails_the_call(tmp_path, trust):
    oracle = onnx_oracle(trust, _model(tmp_path, "log", "Log"))
    try:
        assert oracle.act(np.full((1, 17), 2.0)).shape == (1, 17)
        with pytest.raises(OracleFailure, match="non-finite"):
            oracle.act(np.full((1, 17), -1.0))  # log(-1) = NaN
        results = oracle.act_calls(np.array([[2.0] * 17, [-1.0] * 17, [3.0] * 17]), 1)
        assert isinstance(results, list) and isinstance(results[1], OracleFailure)
        assert [type(r) for r in results] == [np.ndarray, OracleFailure, np.ndarray]
    finally:
        oracle.close()


def test_a_wrong_width_fails_each_call_in_the_worker(tmp_path):
    oracle = onnx_oracle("isolated")
    try:
        with pytest.raises(OracleFailure, match="onnxruntime"):
            oracle.act(np.zeros((2, 4)))
        assert oracle.act(np.zeros((1, 17))).shape == (1, 6)  # the same worker answers on
        assert oracle.restarts == 0
    finally:
        oracle.close()


def test_a_corrupt_model_fails_the_worker_s_health_check(tmp_path):
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    oracle = onnx_oracle("isolated", tmp_path / "bad.onnx")
    try:
        with pytest.raises(OracleError, match="health check.*cannot load ONNX model"):
            oracle.probe()
    finally:
        oracle.close()


def test_a_worker_that_dies_fails_its_call_and_a_fresh_one_answers_the_next():
    oracle = onnx_oracle("isolated")
    try:
        obs = np.zeros((1, 17))
        first = oracle.act(obs)
        os.kill(oracle.channel.pid, signal.SIGKILL)
        with pytest.raises(OracleFailure, match="exited"):
            oracle.act(obs)
        assert oracle.act(obs).tobytes() == first.tobytes() and oracle.restarts == 1
    finally:
        oracle.close()


def test_a_worker_that_hangs_fails_at_the_deadline_and_is_replaced():
    oracle = onnx_oracle("isolated", timeout_s=0.5)
    try:
        obs = np.zeros((1, 17))
        first = oracle.act(obs)
        os.kill(oracle.channel.pid, signal.SIGSTOP)
        with pytest.raises(OracleFailure, match="no complete reply within 0.5s"):
            oracle.act(obs)
        assert oracle.act(obs).tobytes() == first.tobytes() and oracle.restarts == 1
    finally:
        oracle.close()


def test_the_worker_reads_the_model_at_its_first_request_not_at_start(tmp_path):
    """A worker started early (beside the run's own start-up, before the run hashed its inputs)
    imports onnxruntime at once but reads the model file only when the first request comes: the
    bytes it runs are the bytes the run hashed by then."""
    model = tmp_path / "m.onnx"
    model.write_bytes(b"not a model yet")
    oracle = onnx_oracle("isolated", model)
    try:
        oracle.start()
        maps = Path(f"/proc/{oracle.channel.pid}/maps")
        for _ in range(400):  # until the worker has imported onnxruntime (its native module)
            if "onnxruntime" in maps.read_text():
                break
            time.sleep(0.025)
        else:
            pytest.fail("the worker did not import onnxruntime before its first request")
        time.sleep(0.2)  # a worker that read the model now would hold the bytes above
        model.write_bytes(MODEL.read_bytes())
        assert oracle.act(np.zeros((1, 17))).shape == (1, 6)
    finally:
        oracle.close()


def test_an_onnx_policy_worker_steps_the_default_lockstep_copies():
    """K for an ONNX model in a policy worker: :data:`LOCKSTEP_DEFAULT`, in a lone run (its two
    halves of copies) as in a pool worker (whole steps) — not a ``python:`` policy's
    :data:`LOCKSTEP_APART`, whose 64 simulator copies cost more to build than their round trips
    save; in process it stays 1, and a sequential run 1."""
    from dataclasses import replace

    from safecert.blackbox.backends import (
        LOCKSTEP_APART,
        LOCKSTEP_DEFAULT,
        RunContext,
        lockstep,
    )
    from safecert.blackbox.config import RunConfig

    config = RunConfig.model_validate(
        {"policy": f"onnx:{MODEL}", "env": "SafeHalfCheetahVelocity-v0", "episodes": 10}
    )
    spec = parse_oracle_spec(config.policy, base_dir=VENDORS)
    ctx = RunContext(config, str(VENDORS), ({},), None, spec)
    assert spec.in_worker and 2 <= LOCKSTEP_DEFAULT < LOCKSTEP_APART
    assert lockstep(ctx, alone=True) == lockstep(ctx) == LOCKSTEP_DEFAULT
    python = replace(ctx, oracle=replace(spec, kind="python"))
    assert lockstep(python, alone=True) == LOCKSTEP_APART
    assert lockstep(replace(ctx, sequential=True), alone=True) == 1
    trusted = replace(ctx, oracle=replace(spec, trust="in-process"))
    assert lockstep(trusted, alone=True) == lockstep(trusted) == 1
