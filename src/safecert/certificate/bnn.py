"""The certificate model of the BNN engine: kind ``bnn``."""

from __future__ import annotations

from typing import Literal

from safecert.bnn.result import BnnResult
from safecert.certificate import Envelope


class BnnCertificate(Envelope):
    kind: Literal["bnn"]
    verdict: Literal["SAFE", "UNKNOWN"]
    result: BnnResult
