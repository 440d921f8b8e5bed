"""A small payments tools server (MCP over stdio) — the upstream that `safecert shield serve` fronts.

Tools: ``lookup_invoice(invoice)``, ``request_approval(invoice)`` (a human approves with
probability 0.6; the answer is random), ``pay(invoice, amount)``. Every executed call is appended to
the JSON Lines file named by ``PAYMENTS_RECORD`` (when set): the server's own record of what it
did, which tests compare with the guard's decisions. Run: ``python tools_server.py``.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time

from mcp.server.mcpserver import MCPServer

INVOICES = {
    f"INV-{i:03d}": {"payee": f"vendor-{i % 7}", "amount": (i * 379) % 2500 + 50}
    for i in range(100)
}
_record_lock = threading.Lock()
_rng = random.Random(int(os.environ.get("PAYMENTS_SEED", "0")))

app = MCPServer("payments")


def _record(tool: str, arguments: dict, result: object) -> None:
    path = os.environ.get("PAYMENTS_RECORD")
    if path:
        line = json.dumps(
            {"time": time.time(), "tool": tool, "arguments": arguments, "result": result}
        )
        with _record_lock, open(path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")


def lookup_invoice(invoice: str) -> dict:
    """Look an invoice up: its payee and amount."""
    found = INVOICES.get(invoice)
    result = {"invoice": invoice, "found": found is not None, **(found or {})}
    _record("lookup_invoice", {"invoice": invoice}, result)
    return result


def request_approval(invoice: str) -> dict:
    """Ask a human to approve paying the invoice; the answer is yes or no."""
    result = {"invoice": invoice, "approved": _rng.random() < 0.6}
    _record("request_approval", {"invoice": invoice}, result)
    return result


def pay(invoice: str, amount: float) -> dict:
    """Pay ``amount`` on the invoice (irreversible)."""
    result = {"invoice": invoice, "amount": amount, "status": "paid"}
    _record("pay", {"invoice": invoice, "amount": amount}, result)
    return result


for _fn in (lookup_invoice, request_approval, pay):
    app.tool()(_fn)

if __name__ == "__main__":
    app.run()
