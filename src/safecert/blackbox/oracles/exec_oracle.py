"""``exec:program arg ...`` — a vendor program speaking newline-delimited JSON on stdin/stdout.

Protocol (docs/architecture.md, "Policy oracles"): each request is one line
``{"observations": [[...], ...]}``; the program answers each with one line
``{"actions": [[...], ...]}``, in order, or ``{"error": "why"}`` to fail that call with its reason.
Its stdout carries replies only (diagnostics go to stderr, which safecert keeps the tail of for
error messages). safecert's own policy workers (``python:``, ``sb3:``, ``torchscript:``; see
:mod:`safecert.blackbox.oracles.worker`) speak the same protocol.
"""

from __future__ import annotations

import numpy as np

from safecert.blackbox.oracles import OracleSpec
from safecert.blackbox.oracles.base import OracleFailure, health_check, json_call
from safecert.isolation import Channel, ChannelFailure


class ExecOracle:
    """A long-running vendor process (:class:`safecert.isolation.Channel`: a deadline per call,
    a start-up grace, a supervised subtree killed on a timeout, a crash or ``close``, and a fresh
    process on the next call; ``restarts`` counts them). One request is one batch: ``B``
    observations cost one round trip."""

    def __init__(self, spec: OracleSpec, *, what: str = "vendor", label: str | None = None) -> None:
        self.spec = spec
        self.channel = Channel(
            spec.argv,
            cwd=spec.base_dir,
            timeout_s=spec.timeout_s,
            what=what,
            handshake=spec.in_worker,
        )
        self.label = label or f"vendor program {' '.join(spec.argv)!r}"

    @property
    def restarts(self) -> int:
        return self.channel.restarts

    def _round_trip(self, payload: bytes) -> bytes:
        try:
            return self.channel.round_trip(payload)
        except ChannelFailure as exc:
            raise OracleFailure(exc.reason) from None

    # -- the Oracle protocol ------------------------------------------------------------------
    def act(self, observations: np.ndarray) -> np.ndarray:
        return json_call(self._round_trip, observations)

    def probe(self, observations: np.ndarray | None = None) -> None:
        """Start the program and make one real call (``observations``, or a zero-row batch)."""
        obs = np.zeros((0, 0)) if observations is None else observations
        health_check(self, obs, self.label)

    def close(self) -> None:
        """Close the vendor's stdin, give it 1 s to exit, then kill and reap it and everything it
        started (safe to call twice)."""
        self.channel.close()

    def __enter__(self) -> ExecOracle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
