"""The certificate models of the black-box engine: kinds ``blackbox`` and ``sequential``."""

from __future__ import annotations

from typing import Literal

from safecert.blackbox.result import BlackboxResult, SequentialResult
from safecert.certificate import Envelope


class BlackboxCertificate(Envelope):
    kind: Literal["blackbox"]
    verdict: Literal["PASS", "FAIL"]
    result: BlackboxResult


class SequentialCertificate(Envelope):
    kind: Literal["sequential"]
    verdict: Literal["PASS", "FAIL", "INCONCLUSIVE"]
    result: SequentialResult
