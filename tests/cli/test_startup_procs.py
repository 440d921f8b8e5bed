"""Closing a supervised vendor waits for its supervisor's exit itself, not by polling
(issue 28, item 3: ``certify`` closes its policy worker before the report)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from safecert import procs

pytestmark = pytest.mark.skipif(
    not procs.SUPERVISED or not hasattr(os, "pidfd_open"), reason="Linux supervisor and pidfds"
)


def test_kill_reaps_the_supervisor_without_sleeping_between_looks(monkeypatch):
    """``Popen.wait(timeout)`` sleeps 1, 2, 4 … ms between looks; ``kill`` is woken by the
    supervisor's exit instead (a pidfd), so it never sleeps, and the supervisor is reaped and
    every process of the vendor gone when it returns."""
    cat = shutil.which("cat")
    assert cat is not None
    vendor = procs.VendorProcess([cat])
    supervisor, pid = vendor.pid, vendor.vendor_pid
    slept: list[float] = []

    def no_sleep(seconds: float) -> None:
        slept.append(seconds)
        raise AssertionError(f"kill slept {seconds}s")

    monkeypatch.setattr(time, "sleep", no_sleep)
    try:
        vendor.kill()
    finally:
        monkeypatch.undo()
        for pipe in (vendor.stdin, vendor.stdout, vendor.stderr):
            pipe.close()
    assert slept == []
    assert vendor.poll() is not None  # reaped by kill
    with pytest.raises(ProcessLookupError):
        os.kill(supervisor, 0)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_supervisor_that_does_not_exit_in_time_is_a_timeout_then_killed(tmp_path):
    """The wait keeps ``Popen.wait``'s contract: ``TimeoutExpired`` once the time is up (here the
    supervisor is stopped, so it cannot exit), then ``kill`` SIGKILLs its session as before."""
    vendor = procs.VendorProcess([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        os.kill(vendor.pid, 19)  # SIGSTOP: the supervisor cannot act on a close request
        with pytest.raises(subprocess.TimeoutExpired):
            vendor._wait_exit(0.05)
        assert vendor.poll() is None
    finally:
        vendor._force_kill()
        for pipe in (vendor.stdin, vendor.stdout, vendor.stderr):
            pipe.close()
    assert vendor.poll() is not None


def test_wait_with_a_timeout_is_woken_by_the_exit(monkeypatch):
    """``wait(timeout)`` (a polite close: end of input, then wait for the exit) is woken by the
    supervisor's exit too, and returns the vendor's exit code."""
    cat = shutil.which("cat")
    assert cat is not None
    vendor = procs.VendorProcess([cat])
    vendor.started()

    def no_sleep(seconds: float) -> None:
        raise AssertionError(f"wait slept {seconds}s")

    try:
        vendor.stdin.close()  # cat ends at end of input, its supervisor with it
        monkeypatch.setattr(time, "sleep", no_sleep)
        assert vendor.wait(10.0) == 0
    finally:
        monkeypatch.undo()
        vendor.kill()
        vendor.stdout.close()
        vendor.stderr.close()


def test_waiting_again_for_a_reaped_vendor_answers_its_exit_code_at_once(monkeypatch):
    """Once reaped, the vendor's pid may name another process: a second ``wait(timeout)`` gives
    the exit code it had, and never waits on whatever now holds that pid (here: the test's own
    process, which pidfd_open is made to open for any pid)."""
    cat = shutil.which("cat")
    assert cat is not None
    vendor = procs.VendorProcess([cat])
    vendor.started()
    try:
        vendor.stdin.close()
        assert vendor.wait(10.0) == 0
        real_open = os.pidfd_open
        monkeypatch.setattr(os, "pidfd_open", lambda pid, flags=0: real_open(os.getpid()))
        assert vendor.wait(0.5) == 0  # before: TimeoutExpired, having waited on the reused pid
    finally:
        monkeypatch.undo()
        vendor.kill()
        vendor.stdout.close()
        vendor.stderr.close()
