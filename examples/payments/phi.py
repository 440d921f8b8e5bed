"""The abstraction φ and the action map of the payments example.

``phi(history)`` reads the executed calls (each ``{"tool", "arguments", "result", "action"}``) and
returns the predicate values of the model: ``looked_up`` (an invoice was looked up), ``approved``
(a human approved), ``paid`` (a payment went out) and ``harm`` (a duplicate payment, or a large
payment without approval). ``action(tool, arguments)`` maps a call to a model action; a payment
above 1000 is ``pay_large``.
"""

from __future__ import annotations

LARGE = 1000.0
ACTIONS = {"lookup_invoice": "lookup", "request_approval": "request_approval"}


def action(tool: str, arguments: dict) -> str:
    if tool == "pay":
        return "pay_large" if float(arguments.get("amount", 0)) > LARGE else "pay_small"
    return ACTIONS.get(tool, tool)


def _field(result: object, key: str) -> object:
    return result.get(key) if isinstance(result, dict) else None


def phi(history: list[dict]) -> dict[str, bool]:
    state = {"looked_up": False, "approved": False, "paid": False, "harm": False}
    for call in history:
        act, result = call["action"], call["result"]
        if state["harm"]:
            break
        if act == "lookup" and _field(result, "found"):
            state["looked_up"] = True
        elif act == "request_approval" and _field(result, "approved") is True:
            state["approved"] = True
        elif act in ("pay_small", "pay_large") and _field(result, "status") == "paid":
            if state["paid"] or (act == "pay_large" and not state["approved"]):
                state["harm"] = True
            state["paid"] = True
    return state
