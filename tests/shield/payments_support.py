"""Shared pieces of the agent-guard tests: the payments example and an independent replay.

The replay checks a record of executed calls (the tools' own record, not the guard's) against the
certified ``shield.json`` read directly: every executed call was permitted in the state φ gives for
the calls executed before it, and no session executed more than T calls.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PAYMENTS = ROOT / "examples" / "payments"
CERT = PAYMENTS / "cert" / "certificate.json"
PREDICATES = ["looked_up", "approved", "paid", "harm"]
HORIZON = 6
#: the safecert command line run in a child process (the gateway under test)
SAFECERT = [
    sys.executable,
    "-c",
    "import sys; from safecert.cli.main import main; sys.exit(main())",
]
DEADLINE_S = 60  # a hang guard for every wait in the gateway tests, not a speed requirement


def payments_phi() -> Any:
    """The example's phi module, imported from its file."""
    spec = importlib.util.spec_from_file_location("payments_phi", PAYMENTS / "phi.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def label(state: dict[str, bool]) -> str:
    """The model's label of a predicate state, written out independently: ``{p,q}``."""
    if state["harm"]:
        return "harm"
    return "{" + ",".join(p for p in PREDICATES if state[p]) + "}"


def shield_table() -> dict[str, list[str]]:
    return json.loads((CERT.parent / "shield.json").read_text())


def replay_violations(calls: list[dict[str, Any]]) -> list[str]:
    """Calls of one session (``tool``, ``arguments``, ``result``, in execution order) that the
    certified shield did not permit in the state they executed in, or beyond T."""
    phi = payments_phi()
    table = shield_table()
    bad, history = [], []
    for i, call in enumerate(calls):
        action = phi.action(call["tool"], call["arguments"])
        state = phi.phi(history)
        name = label(state) if not state["harm"] else "harm"
        permitted = set(table.get(name, [])) | {"halt"}
        if action not in permitted:
            bad.append(f"call {i}: {action} in {name}")
        if i >= HORIZON:
            bad.append(f"call {i}: beyond T = {HORIZON}")
        history.append({**call, "action": action})
    return bad


def copy_payments(dest: Path) -> Path:
    """The example (tools server, phi, certificate folder) copied into ``dest``, plus ``hooks.py``
    with abstractions that misbehave on purpose."""
    for name in ("tools_server.py", "phi.py", "model.toml"):
        shutil.copy(PAYMENTS / name, dest / name)
    shutil.copytree(PAYMENTS / "cert", dest / "cert")
    (dest / "hooks.py").write_text(HOOKS, encoding="utf-8")
    return dest


HOOKS = """
import time
from phi import action as _action, phi as _phi

def action(tool, arguments):
    if arguments.get("invoice") == "HANG":
        time.sleep(60)
    return _action(tool, arguments)

def phi(history):
    invoices = [c["arguments"].get("invoice") for c in history]
    if "RAISE" in invoices:
        raise RuntimeError("phi cannot read this result")
    if "SLOW" in invoices:
        time.sleep(60)
    return _phi(history)

def phi_not_initial(history):
    return {**_phi(history), "approved": True}
"""


def python() -> str:
    return sys.executable
