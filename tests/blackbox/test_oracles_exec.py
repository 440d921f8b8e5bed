"""exec: oracle against real vendor subprocesses (examples/vendors/exec_vendor.py)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest

from safecert.blackbox.oracles import OracleFailure, make_oracle, parse_oracle_spec
from safecert.errors import OracleError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))
from vendors.point_policies import hazard_avoider  # noqa: E402

OBS = np.random.default_rng(0).normal(size=(7, 14))


def vendor(args: str = "", timeout_s: float = 10.0):
    policy = f"exec:python3 vendors/exec_vendor.py --policy point:hazard_avoider {args}"
    return make_oracle(parse_oracle_spec(policy, base_dir=EXAMPLES, timeout_s=timeout_s))


def test_batch_round_trip_equals_the_policy():
    with vendor() as oracle:
        oracle.probe()
        np.testing.assert_allclose(oracle.act(OBS), hazard_avoider(OBS), rtol=0, atol=1e-12)
        big = np.random.default_rng(1).normal(size=(3000, 14))  # ~800 kB request: pipes multiplexed
        np.testing.assert_allclose(oracle.act(big), hazard_avoider(big), atol=1e-12)
        assert oracle.restarts == 0


def test_crash_mid_run_fails_that_call_and_restarts():
    with vendor("--crash-after 2") as oracle:
        oracle.act(OBS)
        oracle.act(OBS)
        with pytest.raises(OracleFailure, match=r"exit code 3.*simulated crash after 2"):
            oracle.act(OBS)
        np.testing.assert_allclose(oracle.act(OBS), hazard_avoider(OBS), atol=1e-12)
        assert oracle.restarts == 1


def test_hang_times_out_then_recovers():
    with vendor("--hang-after 1", timeout_s=0.5) as oracle:
        oracle.act(OBS)
        start = time.monotonic()
        with pytest.raises(OracleFailure, match="no complete reply within 0.5s"):
            oracle.act(OBS)
        assert 0.45 < time.monotonic() - start < 3.0
        assert oracle.act(OBS).shape == (7, 2)  # a fresh process
        assert oracle.restarts == 1


def test_garbage_reply_is_a_failure_and_the_protocol_stays_in_step():
    with vendor("--garbage-after 0") as oracle:
        with pytest.raises(OracleFailure, match="not valid JSON"):
            oracle.act(OBS)
        np.testing.assert_allclose(oracle.act(OBS), hazard_avoider(OBS), atol=1e-12)
        assert oracle.restarts == 0


def test_no_shell_and_stderr_in_the_probe_error(tmp_path):
    (tmp_path / "argv_vendor.py").write_text(
        "import sys\nprint('argv=' + repr(sys.argv[1:]), file=sys.stderr)\nsys.exit(7)\n"
    )
    spec = parse_oracle_spec("exec:python3 argv_vendor.py '$HOME' ';' 'x|y'", base_dir=tmp_path)
    oracle = make_oracle(spec)
    with pytest.raises(OracleError, match=r"exit code 7.*\$HOME.*';'.*x\|y") as info:
        oracle.probe()
    assert "\n" not in str(info.value)
    oracle.close()


def test_relative_program_path_resolves_from_base_dir(tmp_path):
    script = tmp_path / "bin" / "vendor.sh"
    script.parent.mkdir()
    script.write_text(
        f"#!/bin/sh\nexec {sys.executable} {EXAMPLES / 'vendors' / 'exec_vendor.py'}\n"
    )
    script.chmod(0o755)
    spec = parse_oracle_spec("exec:bin/vendor.sh", base_dir=tmp_path)
    assert spec.argv == (str(script.resolve()),) and spec.artifacts == (str(script.resolve()),)
    oracle = make_oracle(spec)
    np.testing.assert_allclose(oracle.act(OBS), hazard_avoider(OBS), atol=1e-12)
    oracle.close()
