"""The certificate models of the black-box engine: kinds ``blackbox`` and ``sequential``."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict

from safecert.blackbox.result import BlackboxResult, SequentialResult
from safecert.certificate import Envelope


class BlackboxCertificate(Envelope):
    kind: Literal["blackbox"]
    verdict: Literal["PASS", "FAIL"]
    result: BlackboxResult


class SequentialCertificate(Envelope):
    model_config = ConfigDict(defer_build=True)

    kind: Literal["sequential"]
    verdict: Literal["PASS", "FAIL", "INCONCLUSIVE"]
    result: SequentialResult
