"""The certificate model of the shield engine: kind ``shield``."""

from __future__ import annotations

from typing import Literal

from safecert.certificate import Envelope
from safecert.shield.result import ShieldResult


class ShieldCertificate(Envelope):
    kind: Literal["shield"]
    verdict: Literal["PASS", "FAIL", "BOUND"]
    result: ShieldResult
