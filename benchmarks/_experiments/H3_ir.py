"""Instructions per guard check (callgrind), for helper H3's round (issue 24.3): run under
``valgrind --tool=callgrind`` with N checks and with 0; the difference over N is the cost of one
``GuardSession.decide`` of a permitted ``lookup_invoice`` (payments example), all threads counted
(the deadline worker's too), load-independent.

    valgrind --tool=callgrind --callgrind-out-file=/dev/null python H3_ir.py {python|rules} N
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from safecert.shield.abstraction import Abstraction
from safecert.shield.action_rules import load_action_rules
from safecert.shield.certified import load_certified_shield
from safecert.shield.session import GuardSession

PAYMENTS = Path(__file__).resolve().parents[2] / "examples" / "payments"


def main() -> None:
    which, n = sys.argv[1], int(sys.argv[2])
    spec = importlib.util.spec_from_file_location("payments_phi", PAYMENTS / "phi.py")
    assert spec is not None and spec.loader is not None
    phi = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(phi)
    shield = load_certified_shield(PAYMENTS / "cert" / "certificate.json")
    action_map = phi.action if which == "python" else load_action_rules(PAYMENTS / "actions.toml")
    session = GuardSession(shield, Abstraction(shield.model, phi.phi, action_map))
    args = {"invoice": "INV-001"}
    assert session.decide("lookup_invoice", args).allowed
    for _ in range(n):
        session.decide("lookup_invoice", args)


if __name__ == "__main__":
    main()
