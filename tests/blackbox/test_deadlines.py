"""Deadlines, not timeouts: a vendor that trickles its reply fails the call by ``timeout_s`` + 1 s.

Real vendors: the hostile vendor as an HTTP server on 127.0.0.1 and as an exec program."""

from __future__ import annotations

import time

import numpy as np
import pytest

from safecert.blackbox.oracles import OracleFailure, make_oracle, parse_oracle_spec
from tests.blackbox.hostile import VENDOR, exec_oracle, http_vendor

OBS = np.random.default_rng(0).normal(size=(3, 4))
EXPECTED = (OBS[:, 2] + 0.5 * OBS[:, 3] > 0).astype(np.int64)[:, None]


def http_oracle(url: str, timeout_s: float, retries: int = 3):
    return make_oracle(
        parse_oracle_spec(url, base_dir=VENDOR.parent, timeout_s=timeout_s, retries=retries)
    )


def timed_failure(call) -> tuple[float, str]:
    start = time.monotonic()
    with pytest.raises(OracleFailure) as info:
        call()
    return time.monotonic() - start, info.value.reason


def test_http_slow_drip_reply_fails_within_the_deadline():
    # one byte every 0.3 s: each read returns well within any per-read timeout
    with http_vendor("--drip", "0.3", "--drip-after", "1") as url:
        oracle = http_oracle(f"{url}/act", timeout_s=1.0, retries=3)
        np.testing.assert_array_equal(oracle.act(OBS), EXPECTED)  # the first reply is prompt
        took, reason = timed_failure(lambda: oracle.act(OBS))
        oracle.close()
    assert 0.9 <= took <= 2.0, took
    assert "no complete reply within 1s (deadline of the whole call) (1 attempt)" in reason


def test_http_endless_drip_fails_within_the_deadline():
    with http_vendor("--drip", "0.2", "--endless") as url:
        oracle = http_oracle(f"{url}/act", timeout_s=1.0)
        took, reason = timed_failure(lambda: oracle.act(OBS))
        oracle.close()
    assert took <= 2.0 and "no complete reply within 1s" in reason


def test_http_drip_that_ends_in_time_is_a_reply():
    with http_vendor("--drip", "0.001") as url:  # ~150 bytes: about 0.2 s
        oracle = http_oracle(f"{url}/act", timeout_s=5.0)
        np.testing.assert_array_equal(oracle.act(OBS), EXPECTED)
        oracle.close()


def test_exec_slow_drip_fails_within_the_deadline_even_on_the_first_call():
    # the start-up grace ends at the vendor's first byte: a trickle gets timeout_s, not 30 s more
    with exec_oracle("--drip", "0.3", timeout_s=1.0) as oracle:
        took, reason = timed_failure(lambda: oracle.act(OBS))
        assert took <= 2.0, took
        assert "no complete reply within 1s" in reason


def test_exec_drip_after_a_prompt_reply_fails_within_the_deadline():
    with exec_oracle("--drip", "0.3", "--drip-after", "1", timeout_s=1.0) as oracle:
        np.testing.assert_array_equal(oracle.act(OBS), EXPECTED)
        took, _ = timed_failure(lambda: oracle.act(OBS))
        assert 0.9 <= took <= 2.0, took


def test_a_flooding_vendor_is_cut_at_the_reply_size_limit():
    """Bytes without end, as fast as the pipe or socket takes them: memory stays bounded."""
    with exec_oracle("--flood", timeout_s=30.0) as oracle:
        took, reason = timed_failure(lambda: oracle.act(OBS))
        assert "longer than 64 MiB" in reason and took < 30
    with http_vendor("--flood") as url:
        oracle = http_oracle(f"{url}/act", timeout_s=30.0)
        took, reason = timed_failure(lambda: oracle.act(OBS))
        oracle.close()
    assert "longer than 64 MiB" in reason and took < 30
