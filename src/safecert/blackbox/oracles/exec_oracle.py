"""``exec:program arg ...`` — a vendor program speaking newline-delimited JSON on stdin/stdout.

Protocol (ARCHITECTURE.md): each request is one line ``{"observations": [[...], ...]}``; the program
answers each with one line ``{"actions": [[...], ...]}``, in order. Its stdout carries replies only
(diagnostics go to stderr, which safecert keeps the tail of for error messages).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from typing import IO

import numpy as np

from safecert.blackbox.oracles import OracleSpec
from safecert.blackbox.oracles.base import OracleFailure, health_check, json_call

_STDERR_TAIL = 2000
_CHUNK = 1 << 16
STARTUP_GRACE_S = 30.0  # extra time for the first call after a (re)start: imports, model loading


class ExecOracle:
    """A long-running vendor process, started lazily, without a shell, in the config's folder.

    Guarantees: a call never blocks longer than ``timeout_s`` (non-blocking pipes multiplexed with
    ``select``; writes, reads and the vendor's stderr are all serviced within the deadline), except
    that the first call after a (re)start may also spend :data:`STARTUP_GRACE_S` on the program's
    start-up (interpreter, imports, model loading). A call
    that times out kills the vendor's process group (a late reply would put requests and replies
    out of step); a vendor that exits or closes its pipes fails the call with its exit code and the
    tail of its stderr. Either way the next call starts a fresh process (``restarts`` counts them).
    One request is one batch: ``B`` observations cost one round trip.
    """

    def __init__(self, spec: OracleSpec) -> None:
        self.spec = spec
        self.restarts = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._buf = b""
        self._stderr = b""
        self._started = 0

    # -- process management -------------------------------------------------------------------
    def _start(self) -> subprocess.Popen[bytes]:
        try:
            proc = subprocess.Popen(
                list(self.spec.argv),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self.spec.base_dir,
                bufsize=0,
                start_new_session=True,  # own process group: a timeout kills the vendor's children too
            )
        except OSError as exc:
            raise OracleFailure(f"cannot start {self.spec.argv[0]}: {exc}") from None
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            assert pipe is not None
            os.set_blocking(pipe.fileno(), False)
        if self._started:
            self.restarts += 1
        self._started += 1
        self._proc, self._buf, self._stderr = proc, b"", b""
        return proc

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                proc.kill()
        proc.wait()
        _close(proc.stdin, proc.stdout, proc.stderr)

    def _crashed(self, proc: subprocess.Popen[bytes], what: str) -> OracleFailure:
        try:
            code: int | None = proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            code = None
        self._drain_stderr(proc)
        tail = self._stderr.decode(errors="replace").strip().splitlines()[-3:]
        self._kill()
        detail = f"; stderr: {' | '.join(tail)}" if tail else ""
        return OracleFailure(
            f"vendor {what} (exit code {code}){detail}; restarted on the next call"
        )

    def _drain_stderr(self, proc: subprocess.Popen[bytes]) -> bool:
        assert proc.stderr is not None
        try:
            data = proc.stderr.read(_CHUNK)
        except (BlockingIOError, ValueError):
            return True
        if data is None:  # nothing to read right now
            return True
        if data:
            self._stderr = (self._stderr + data)[-_STDERR_TAIL:]
        return bool(data)

    # -- one round trip -----------------------------------------------------------------------
    def _round_trip(self, payload: bytes) -> bytes:
        proc = self._proc
        grace = 0.0
        if proc is None or proc.poll() is not None:
            # Never started, or exited after its last reply (nothing was lost): start afresh.
            self._kill()
            proc = self._start()
            grace = STARTUP_GRACE_S
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        out = payload + b"\n"
        deadline = time.monotonic() + self.spec.timeout_s + grace
        readers = [proc.stdout, proc.stderr]
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._kill()
                raise OracleFailure(
                    f"no reply within {self.spec.timeout_s + grace:g}s; vendor killed, restarted on the next call"
                )
            writers = [proc.stdin] if out else []
            ready_r, ready_w, _ = select.select(readers, writers, [], remaining)
            if ready_w:
                try:
                    out = out[os.write(proc.stdin.fileno(), out[:_CHUNK]) :]
                except BlockingIOError:
                    pass
                except (BrokenPipeError, OSError):
                    raise self._crashed(proc, "closed its input") from None
            if proc.stderr in ready_r and not self._drain_stderr(proc):
                readers.remove(proc.stderr)
            if proc.stdout in ready_r:
                data = proc.stdout.read(_CHUNK)
                if data is None:
                    continue
                if not data:
                    raise self._crashed(proc, "exited")
                self._buf += data
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    # -- the Oracle protocol ------------------------------------------------------------------
    def act(self, observations: np.ndarray) -> np.ndarray:
        return json_call(self._round_trip, observations)

    def probe(self, observations: np.ndarray | None = None) -> None:
        """Start the program and make one real call (``observations``, or a zero-row batch)."""
        obs = np.zeros((0, 0)) if observations is None else observations
        health_check(self, obs, f"vendor program {' '.join(self.spec.argv)!r}")

    def close(self) -> None:
        """Close the vendor's stdin (a polite end of input), then kill it if it lingers."""
        proc = self._proc
        if proc is None:
            return
        try:
            _close(proc.stdin)
            proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass
        self._kill()

    def __enter__(self) -> ExecOracle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _close(*pipes: IO[bytes] | None) -> None:
    for pipe in pipes:
        if pipe is not None:
            try:
                pipe.close()
            except OSError:
                pass
