"""Oracle specs and the python: oracle, plus the reply checks shared by every oracle."""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from safecert.blackbox.oracles import (
    OracleFailure,
    check_actions,
    decode_reply,
    encode_request,
    make_oracle,
    parse_oracle_spec,
)
from safecert.errors import ConfigError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def write_module(tmp_path: Path, name: str, body: str) -> Path:
    (tmp_path / f"{name}.py").write_text(body)
    return tmp_path


def test_python_oracle_batched_matches_direct_call():
    spec = parse_oracle_spec("python:vendors.point_policies:goal_seeker", base_dir=EXAMPLES)
    assert spec.kind == "python" and spec.artifacts[0].endswith("point_policies.py")
    sys.path.insert(0, str(EXAMPLES))
    from vendors.point_policies import goal_seeker

    oracle = make_oracle(pickle.loads(pickle.dumps(spec)))
    oracle.probe()
    assert oracle.channel.pid not in (None, os.getpid())  # it runs in its own worker
    obs = np.random.default_rng(0).normal(size=(5, 14))
    np.testing.assert_array_equal(oracle.act(obs), goal_seeker(obs))
    oracle.close()


def test_python_oracle_per_observation(tmp_path):
    base = write_module(
        tmp_path, "perobs_pol", "def act(o):\n    assert o.ndim == 1\n    return [o[0], -o[1]]\n"
    )
    oracle = make_oracle(parse_oracle_spec("python:perobs_pol:act", base_dir=base, batched=False))
    obs = np.arange(6.0).reshape(3, 2)
    np.testing.assert_array_equal(oracle.act(obs), np.stack([obs[:, 0], -obs[:, 1]], axis=1))


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("def act(o):\n    raise RuntimeError('boom')\n", "RuntimeError: boom"),
        ("def act(o):\n    return o[:1, :2]\n", "expected 3 action rows, got 1"),
        ("def act(o):\n    return o[:, :2] * float('nan')\n", "non-finite"),
        (
            "def act(o):\n    return [['a', 'b']] * len(o)\n",
            r"not numbers \(a str at actions\[0\]\[0\]",
        ),
        ("def act(o):\n    return 1.0\n", "scalar"),
        (
            "import time\ndef act(o):\n    time.sleep(0.3)\n    return o\n",
            "no complete reply within 0.2s",
        ),
    ],
)
def test_python_oracle_failures_name_the_reason(tmp_path, body, reason):
    name = f"badpol_{abs(hash(body))}"
    base = write_module(tmp_path, name, body)
    oracle = make_oracle(parse_oracle_spec(f"python:{name}:act", base_dir=base, timeout_s=0.2))
    with pytest.raises(OracleFailure, match=reason):
        oracle.act(np.zeros((3, 4)))


def test_integer_actions_keep_integer_dtype():
    out = check_actions([[1], [0]], 2)
    assert out.dtype == np.int64 and out.shape == (2, 1)


@pytest.mark.parametrize("rows", [1, 3, 200])  # 200 × 2 values: the numpy path (> 256)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_actions_are_refused_in_small_and_large_replies(rows, bad):
    rng = np.random.default_rng(rows)
    for where in range(0, rows * 2, max(1, rows // 3)):
        reply = rng.normal(size=(rows, 2)).astype(np.float32)
        reply.flat[where] = bad
        with pytest.raises(OracleFailure, match="non-finite"):
            check_actions(reply, rows)
    fine = rng.normal(size=(rows, 2)) * 1e300  # large but finite: not refused
    assert np.array_equal(check_actions(fine, rows), fine)


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"not json", "not valid JSON"),
        (b'{"act": [[1]]}', 'no "actions"'),
        (b'{"actions": [[1, 2], [3]]}', "rectangular"),
        (b'{"actions": [[NaN], [1]]}', "non-finite"),
        (b'{"actions": [[1.0]]}', "expected 2 action rows"),
    ],
)
def test_decode_reply_rejects_bad_replies(payload, reason):
    with pytest.raises(OracleFailure, match=reason):
        decode_reply(payload, 2)


@pytest.mark.parametrize(
    ("policy", "fragment"),
    [
        ("ftp://x", "unknown policy scheme"),
        ("onnx:missing.onnx", "does not exist"),
        ("python:no_such_module_xyz:act", "cannot import"),
        ("exec:python3 missing_vendor.py", "does not exist"),
        ("exec:no-such-program-xyz", "not on PATH"),
        ("http://", "invalid URL|no host"),
    ],
)
def test_bad_policy_strings_are_one_config_error(policy, fragment):
    with pytest.raises(ConfigError, match=fragment) as info:
        parse_oracle_spec(policy, base_dir=EXAMPLES)
    assert str(info.value).startswith("policy:") and "\n" not in str(info.value)


def test_missing_python_attribute_fails_the_health_check_in_the_worker():
    from safecert.errors import OracleError

    oracle = make_oracle(parse_oracle_spec("python:vendors.point_policies:nope", base_dir=EXAMPLES))
    try:
        with pytest.raises(OracleError, match="policy: .*no attribute 'nope'") as info:
            oracle.probe()
        assert "\n" not in str(info.value)
    finally:
        oracle.close()


def test_exec_spec_resolves_interpreter_and_script():
    spec = parse_oracle_spec("exec:python3 vendors/point_policies.py --flag", base_dir=EXAMPLES)
    assert spec.argv[0] == sys.executable
    assert Path(spec.argv[1]).is_absolute() and spec.argv[2] == "--flag"


def test_header_env_expansion_missing_variable(monkeypatch):
    monkeypatch.delenv("SAFECERT_TEST_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="headers.Authorization: .*SAFECERT_TEST_TOKEN"):
        parse_oracle_spec(
            "http://127.0.0.1:9/act",
            base_dir=EXAMPLES,
            headers={"Authorization": "Bearer ${SAFECERT_TEST_TOKEN}"},
        )
    monkeypatch.setenv("SAFECERT_TEST_TOKEN", "s3cret")
    spec = parse_oracle_spec(
        "http://127.0.0.1:9/act",
        base_dir=EXAMPLES,
        headers={"Authorization": "Bearer ${SAFECERT_TEST_TOKEN}"},
    )
    assert spec.headers == (("Authorization", "Bearer ${SAFECERT_TEST_TOKEN}"),)


def _act_in_worker(spec, obs):
    oracle = make_oracle(spec)
    try:
        return oracle.act(obs)
    finally:
        oracle.close()


def test_oracles_are_built_inside_a_spawned_worker_from_the_spec():
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from vendors.point_policies import hazard_avoider

    specs = [
        parse_oracle_spec(policy, base_dir=EXAMPLES)
        for policy in (
            "python:vendors.point_policies:hazard_avoider",
            "exec:python3 vendors/exec_vendor.py --policy point:hazard_avoider",
        )
    ]
    obs = np.random.default_rng(3).normal(size=(4, 14))
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        results = [pool.submit(_act_in_worker, spec, obs).result(timeout=120) for spec in specs]
    for got in results:
        np.testing.assert_allclose(got, hazard_avoider(obs), atol=1e-12)


def test_every_oracle_kind_satisfies_the_protocol(tmp_path):
    from safecert.blackbox.oracles import Oracle

    (tmp_path / "m.onnx").write_bytes(b"")
    for policy in (
        "python:vendors.point_policies:goal_seeker",
        "exec:python3 vendors/exec_vendor.py",
        "http://127.0.0.1:9/act",
        f"onnx:{tmp_path / 'm.onnx'}",
    ):
        assert isinstance(make_oracle(parse_oracle_spec(policy, base_dir=EXAMPLES)), Oracle)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_decode_reply_fuzz_only_raises_oracle_failure(payload):
    try:
        out = decode_reply(payload, 2)
    except OracleFailure:
        return
    assert out.shape[0] == 2 and (out.dtype == np.int64 or np.all(np.isfinite(out)))


@settings(max_examples=100, deadline=None)
@given(
    arrays(
        np.float64,
        st.tuples(st.integers(1, 5), st.integers(1, 4)),  # zero rows carry no width in JSON
        elements=st.floats(-1e6, 1e6, allow_nan=False),
    )
)
def test_encode_decode_round_trip(actions):
    import json

    payload = json.dumps({"actions": actions.tolist()})
    np.testing.assert_array_equal(decode_reply(payload, len(actions)), actions)
    assert json.loads(encode_request(actions))["observations"] == actions.tolist()
