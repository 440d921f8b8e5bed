"""``exec:program arg ...`` — a vendor program speaking newline-delimited JSON on stdin/stdout.

Protocol (docs/architecture.md, "Policy oracles"): each request is one line
``{"observations": [[...], ...]}``; the program answers each with one line
``{"actions": [[...], ...]}``, in order. Its stdout carries replies only
(diagnostics go to stderr, which safecert keeps the tail of for error messages).
"""

from __future__ import annotations

import os
import select
import subprocess
import time
from typing import IO

import numpy as np

from safecert import procs
from safecert.blackbox.oracles import OracleSpec
from safecert.blackbox.oracles.base import OracleFailure, health_check, json_call

_STDERR_TAIL = 2000
_CHUNK = 1 << 16
#: the longest reply line (exec) or body (HTTP) accepted; a batch of 4096 rows is a few MB
MAX_REPLY_BYTES = 64 << 20
STARTUP_GRACE_S = 30.0  # extra time for the first call after a (re)start: imports, model loading


class ExecOracle:
    """A long-running vendor process, started lazily, without a shell, in the config's folder.

    Guarantees: a call is a *deadline*, not a per-read timeout: it fails ``timeout_s`` after it
    started however the vendor trickles its reply (non-blocking pipes multiplexed with ``select``;
    writes, reads and the vendor's stderr are all serviced within the deadline). The only extension
    is start-up: on the first call after a (re)start, until the vendor writes its first byte of
    stdout, it may also spend :data:`STARTUP_GRACE_S` (interpreter, imports, model loading); from
    its first byte on, the reply must be complete within ``timeout_s``.

    Processes (:class:`safecert.procs.VendorProcess`): on Linux the vendor runs under a supervisor
    that keeps every process it starts in its subtree (``setsid``, double forks and scrubbed
    environments included) and takes that subtree down when asked, when the vendor exits, or when
    the thread that started it dies (``kill -9`` of safecert included). A call that times out kills
    the vendor and everything it started (a late reply would put requests and replies out of
    step); a vendor that exits or closes its pipes fails the call with its exit code and the tail
    of its stderr. Either way the next call starts a fresh process (``restarts`` counts them). ``close``
    kills and reaps whatever the vendor left behind. One request is one batch: ``B`` observations
    cost one round trip.
    """

    def __init__(self, spec: OracleSpec) -> None:
        self.spec = spec
        self.restarts = 0
        self._proc: procs.VendorProcess | None = None
        self._buf = b""
        self._stderr = b""
        self._started = 0

    # -- process management -------------------------------------------------------------------
    def _start(self) -> procs.VendorProcess:
        try:
            proc = procs.VendorProcess(self.spec.argv, cwd=self.spec.base_dir)
        except OSError as exc:
            raise OracleFailure(f"cannot start {self.spec.argv[0]}: {exc}") from None
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            os.set_blocking(pipe.fileno(), False)
        if self._started:
            self.restarts += 1
        self._started += 1
        self._proc, self._buf, self._stderr = proc, b"", b""
        return proc

    def _kill(self) -> None:
        """Kill and reap the vendor and every process it started (``setsid`` ones included)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.kill()
        _close(proc.stdin, proc.stdout, proc.stderr)

    def _crashed(self, proc: procs.VendorProcess, what: str) -> OracleFailure:
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

    def _drain_stderr(self, proc: procs.VendorProcess) -> bool:
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
        out = memoryview(payload + b"\n")
        deadline = time.monotonic() + self.spec.timeout_s + grace
        readers = [proc.stdout, proc.stderr]
        buf = bytearray(self._buf)  # appended in place; only new bytes are searched for "\n"
        newline = buf.find(b"\n")
        while newline < 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._kill()
                # no measured times in the reason: it is part of the episode's (reproducible) record
                extra = f"; start-up grace {grace:g}s" if grace else ""
                raise OracleFailure(
                    f"no complete reply within {self.spec.timeout_s:g}s (deadline of the whole "
                    f"call{extra}); vendor killed, restarted on the next call"
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
                if grace:  # start-up is over at the first byte: the reply itself gets timeout_s
                    deadline = min(deadline, time.monotonic() + self.spec.timeout_s)
                    grace = 0.0
                found = data.find(b"\n")
                newline = -1 if found < 0 else len(buf) + found
                buf += data
                if newline < 0 and len(buf) > MAX_REPLY_BYTES:
                    self._kill()
                    raise OracleFailure(
                        f"reply longer than {MAX_REPLY_BYTES >> 20} MiB without a newline; "
                        "vendor killed, restarted on the next call"
                    )
        line, self._buf = bytes(buf[:newline]), bytes(buf[newline + 1 :])
        return line

    # -- the Oracle protocol ------------------------------------------------------------------
    def act(self, observations: np.ndarray) -> np.ndarray:
        return json_call(self._round_trip, observations)

    def probe(self, observations: np.ndarray | None = None) -> None:
        """Start the program and make one real call (``observations``, or a zero-row batch)."""
        obs = np.zeros((0, 0)) if observations is None else observations
        health_check(self, obs, f"vendor program {' '.join(self.spec.argv)!r}")

    def close(self) -> None:
        """Close the vendor's stdin (a polite end of input), give it 1 s to exit, then kill and
        reap it and everything it started (safe to call twice)."""
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
