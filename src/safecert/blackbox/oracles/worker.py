"""The policy worker: runs a ``python:``, ``onnx:``, ``sb3:`` or ``torchscript:`` policy in a child
process.

Started by :func:`safecert.blackbox.oracles.make_oracle` (through
:class:`safecert.blackbox.oracles.exec_oracle.ExecOracle`, under the vendor supervisor) as

    python -I -B -m safecert.blackbox.oracles.worker KIND TARGET BASE_DIR BATCHED [gated]

it loads the policy once (importing the module with ``BASE_DIR`` first on ``sys.path``, opening
the ONNX model in onnxruntime, unpickling the SB3 zip, loading the TorchScript module) and then
speaks the ``exec:`` protocol on stdin/stdout, after one ``{"ready":true}`` line once loaded. ``gated``: the policy is loaded when
the first request arrives, not at start-up, so a worker started ahead of a run (while safecert
imports and hashes the run's inputs) runs none of the policy's code before it has been hashed; the
ready line then comes before the first reply (what :class:`safecert.isolation.Channel` reads).
Without it (the command of older safecert versions, whose channel waits for the ready line before
its first request) the policy loads at start-up. The protocol: one ``{"observations": [[...]]}`` line in, one ``{"actions": [[...]]}`` or
``{"error": "why"}`` line out; a request with ``"calls": [n1, n2, ...]`` is one policy call per
consecutive group of n1, n2, … rows, answered ``{"calls": [reply1, reply2, ...]}``
(:meth:`safecert.blackbox.oracles.exec_oracle.ExecOracle.act_calls`); with ``"timeout_s": t``
a call that took longer than ``t`` seconds is answered ``{"late": seconds}``, so each call of a step
keeps the deadline a lone call has (the parent's deadline on the whole round trip is the sum;
a vendor can only make this stricter for itself). A policy that cannot be loaded answers every call with its error
(so the pre-run health check names it). Anything the policy prints to stdout is moved to stderr:
stdout carries replies only.

This is the trust boundary (docs/threat-model.md): whatever the policy's code does — patch
safecert, read or write files, fork, or a crafted model file exploiting onnxruntime's parser —
happens in this process, which only ever sends data back.

The replies carry exactly what the policy's oracle gives in process: the observations arrive as
the float64 values the rollout holds (JSON written in shortest round-trip form), each call goes
through the same oracle class on the same rows (an ONNX model casts them to float32 here, as it
does in process), and the checked actions (int64, or float64: an ONNX model's float32 outputs
widened exactly) are written back in shortest round-trip form, so the rollout reads the same
values bit for bit (tests/blackbox/test_onnx_worker.py).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import select
import signal
import sys
import time
from collections.abc import Iterator
from typing import cast

import numpy as np
import orjson


def _oracle(kind: str, target: str, base_dir: str, batched: bool):  # type: ignore[no-untyped-def]
    from safecert.blackbox.oracles import OracleKind, OracleSpec

    # the parent enforces the call's deadline; the in-process classes must not time it again
    spec = OracleSpec(
        kind=cast(OracleKind, kind),
        policy=f"{kind}:{target}",
        target=target,
        base_dir=base_dir,
        timeout_s=math.inf,
        batched=batched,
    )
    if kind == "python":
        from safecert.blackbox.oracles.python_oracle import PythonOracle

        return PythonOracle(spec)
    if kind == "onnx":
        from safecert.blackbox.oracles.onnx_oracle import OnnxOracle

        # the library, not the vendor's model: imported before the first request, while the
        # run that started this worker is still starting up (the model is read at that request)
        with contextlib.suppress(ImportError):  # then the load fails, naming it
            import onnxruntime  # noqa: F401
        return OnnxOracle(spec)
    if kind == "sb3":
        from safecert.blackbox.oracles.sb3_oracle import Sb3Oracle

        return Sb3Oracle(spec)
    from safecert.blackbox.oracles.torchscript_oracle import TorchScriptOracle

    return TorchScriptOracle(spec)


#: how long the worker polls its input for the next request after it has answered one, while
#: told to poll (seconds)
POLL_S = 0.0005
#: the signals that tell the worker to poll (a lone run's worker with a CPU of its own:
#: :meth:`safecert.blackbox.backends.Worker._posting`) and to stop; both are ignored by default,
#: so one that reaches a process without these handlers (not started yet) does nothing
POLL_ON, POLL_OFF = signal.SIGURG, signal.SIGWINCH


def requests(fd: int, polling: list[bool], poll_s: float = POLL_S) -> Iterator[bytes]:
    """The request lines read from ``fd`` (each with its newline; a last line without one as
    it is), until the end of input: the lines, their order and their bytes of a plain read.

    While ``polling[0]`` is true, the next line is awaited by polling ``fd`` for up to
    ``poll_s`` seconds, yielding the CPU between polls, before a blocking read. A lone run
    posts each request while this worker, pinned to a CPU of its own, has just answered the
    last one: a request that finds the worker polling is read at once, whereas one that has to
    wake a sleeping reader on another CPU costs the posting process the wake-up in its
    ``write`` (an inter-processor interrupt; on a virtual machine, an exit to the hypervisor;
    benchmarks/RESULTS_speed.md, round 9). Only that run tells the worker to poll: a worker
    that takes turns with its caller on one CPU would poll while its caller waits for that CPU
    (measured 8–48 % slower)."""
    buf = bytearray()
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    clock, ready, pause = time.monotonic, poller.poll, os.sched_yield
    while True:
        end = buf.find(b"\n") if buf else -1
        if end >= 0:
            line = bytes(buf[: end + 1])
            del buf[: end + 1]
            yield line
            continue
        if polling[0]:
            deadline = clock() + poll_s
            while not ready(0) and clock() < deadline:
                pause()
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            if buf:
                yield bytes(buf)
            return
        if not buf and chunk.find(b"\n") == len(chunk) - 1:
            yield chunk  # one whole request, as one round trip a step sends it: no copies
            continue
        buf += chunk


def main(argv: list[str]) -> int:
    polling = [False]  # set and cleared by the run that started this worker (POLL_ON, POLL_OFF)
    signal.signal(POLL_ON, lambda *_: polling.__setitem__(0, True))
    signal.signal(POLL_OFF, lambda *_: polling.__setitem__(0, False))
    kind, target, base_dir, batched = argv[1], argv[2], argv[3], argv[4] == "1"
    gated = argv[5:] == ["gated"]
    replies = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # the policy's prints go to stderr; stdout is the protocol's
    sys.stdout = sys.stderr
    from safecert.blackbox.oracles.base import OracleFailure
    from safecert.errors import SafecertError

    load_error: str | None = None
    oracle = _oracle(kind, target, base_dir, batched)
    lines = requests(sys.stdin.fileno(), polling)
    first = next(lines, b"") if gated else b""  # gated: load on the first request
    if gated and not first:  # end of input before any request: nothing to load
        return 0
    try:
        # load only, for a model file that answers any row (ONNX): the run's own health check
        # makes the first real call, and a zero row it never sends is no reason to refuse it
        if kind == "onnx":
            oracle.load()
        else:
            oracle.probe()
    except SafecertError as exc:
        load_error = str(exc).partition(": ")[2] if getattr(exc, "field", None) else str(exc)
    except Exception as exc:  # the vendor's module raised at import: a load error, said once
        load_error = f"loading the policy raised {type(exc).__name__}: {exc}"
    replies.write(b'{"ready":true}\n')  # the handshake: start-up is over

    def call(obs: np.ndarray) -> dict:
        """One policy call's reply document."""
        try:
            if load_error is not None:
                raise OracleFailure(load_error)
            actions = oracle.act(obs) if len(obs) else np.zeros((0,))
        except OracleFailure as exc:
            return {"error": exc.reason}
        return {"actions": np.ascontiguousarray(actions)}

    for line in itertools.chain((first,) if first else (), lines):
        try:
            request = orjson.loads(line)
            obs = np.asarray(request["observations"], dtype=np.float64)
            sizes = request.get("calls")
            if sizes is None:
                doc = call(obs)
            else:  # the calls of a lockstep step: one per group of rows, each as if alone
                limit = float(request.get("timeout_s", math.inf))
                calls, start = [], 0
                for n in sizes:
                    if not 0 < int(n) <= len(obs) - start:
                        raise ValueError("calls do not split the observations")
                    began = time.monotonic()
                    doc = call(obs[start : start + int(n)].copy())
                    took = time.monotonic() - began
                    if took > limit:
                        doc = {"late": took}
                    calls.append(doc)
                    start += int(n)
                if start != len(obs) or not calls:
                    raise ValueError("calls do not split the observations")
                doc = {"calls": calls}
            reply = orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            reply = orjson.dumps({"error": f"bad request ({type(exc).__name__})"})
        replies.write(reply + b"\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
