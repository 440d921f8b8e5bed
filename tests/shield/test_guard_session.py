"""The per-session guard (safecert.shield.session) with real threads and the plain Python adapter.

Numbers are checked against the tools' own record through an independent replay of the certified
shield.json (tests/shield/payments_support.py)."""

from __future__ import annotations

import json
import shutil
import threading
import time

import pytest

from safecert.errors import DataError
from safecert.shield.adapters import ShieldBlocked, guarded
from safecert.shield.certified import load_certified_shield
from safecert.shield.certify import certify_shield
from safecert.shield.session import BLOCKED_PREFIX, JsonlSink
from tests.shield.payments_support import CERT, HORIZON, payments_phi, replay_violations

PHI = payments_phi()


class Tools:
    """Payment tools that keep their own record of what they executed (in execution order)."""

    def __init__(self) -> None:
        self.record: list[dict] = []

    def _done(self, tool: str, arguments: dict, result: dict) -> dict:
        self.record.append({"tool": tool, "arguments": arguments, "result": result})
        return result

    def lookup_invoice(self, invoice: str) -> dict:
        return self._done("lookup_invoice", {"invoice": invoice}, {"found": True, "amount": 10})

    def request_approval(self, invoice: str) -> dict:
        return self._done("request_approval", {"invoice": invoice}, {"approved": True})

    def pay(self, invoice: str, amount: float) -> dict:
        time.sleep(0.001)  # widen the window a check-then-act guard would lose
        result = {"status": "paid", "amount": amount}
        return self._done("pay", {"invoice": invoice, "amount": amount}, result)

    def mapping(self) -> dict:
        return {"lookup_invoice": self.lookup_invoice, "request_approval": self.request_approval,
                "pay": self.pay}  # fmt: skip


@pytest.fixture(scope="module")
def shield():
    return load_certified_shield(CERT)


def test_threads_hammering_sessions_execute_only_permitted_calls(shield, tmp_path):
    """4 sessions × 4 threads, every thread proposing payments and lookups as fast as it can:
    every executed call (the tools' record) was permitted in the state it executed in, at most T
    per session, and each session paid exactly once (a duplicate payment is what the old
    check-then-execute guard let through)."""
    steps = JsonlSink(tmp_path / "steps.jsonl")
    sessions = []
    for _ in range(4):
        tools = Tools()
        g = guarded(tools.mapping(), shield, PHI.phi, action_map=PHI.action, steps_log=steps)
        sessions.append((tools, g))
    blocked = [0]

    def hammer(g, seed: int) -> None:
        for i in range(60):
            try:
                if (i + seed) % 3 == 0:
                    g.lookup_invoice(invoice="INV-1")
                else:
                    g.pay(invoice="INV-1", amount=50)
            except ShieldBlocked as exc:
                assert str(exc).startswith(BLOCKED_PREFIX)
                blocked[0] += 1

    threads = [threading.Thread(target=hammer, args=(g, j)) for _, g in sessions for j in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    steps.close()
    for tools, g in sessions:
        assert replay_violations(tools.record) == []
        assert sum(c["tool"] == "pay" for c in tools.record) == 1
        assert len(tools.record) == g.session.steps <= HORIZON
    assert blocked[0] > 0
    # the deployment log re-certifies the same shield (episode = session)
    run = certify_shield(
        CERT.parent / "model.toml", tmp_path / "steps.jsonl", tmp_path / "recert",
        shield_path=CERT.parent / "shield.json",
    )  # fmt: skip
    halts = sum(g.session.ended is not None for _, g in sessions)  # a halt line each
    assert run.certificate.result.steps == sum(len(t.record) for t, _ in sessions) + halts
    # the replay does catch what a check-then-execute guard let through
    pay = {"tool": "pay", "arguments": {"amount": 50}, "result": {"status": "paid"}}
    assert replay_violations([pay, pay]) == ["call 1: pay_small in {paid}"]


def test_horizon_s0_refusals_and_halt(shield, tmp_path):
    tools = Tools()
    g = guarded(tools.mapping(), shield, PHI.phi, action_map=PHI.action)
    for _ in range(HORIZON):
        g.lookup_invoice(invoice="INV-1")
    with pytest.raises(ShieldBlocked, match="horizon T = 6"):
        g.lookup_invoice(invoice="INV-1")
    g.halt()
    assert g.session.ended == "halt" and len(tools.record) == HORIZON
    with pytest.raises(ShieldBlocked, match="session ended"):
        g.lookup_invoice(invoice="INV-1")

    # φ([]) is not the certified s0: every call blocked, with the reason
    tools = Tools()
    g = guarded(tools.mapping(), shield, lambda h: {**PHI.phi(h), "approved": True})
    with pytest.raises(ShieldBlocked, match="not the certified initial state"):
        g.lookup_invoice(invoice="INV-1")
    assert tools.record == []

    # ask_again: the 4th consecutive refusal ends the session; halt policy: the first
    for policy, limit in (("ask_again", 4), ("halt", 1)):
        tools = Tools()
        g = guarded(tools.mapping(), shield, PHI.phi, action_map=PHI.action, on_block=policy)
        for i in range(limit):
            with pytest.raises(ShieldBlocked) as info:
                g.pay(invoice="INV-1", amount=5000)  # pay_large without approval
            assert ("session halted" in str(info.value)) == (i == limit - 1)
        assert g.session.ended is not None and tools.record == []


def test_hung_or_failing_abstraction_blocks_only_its_own_call(shield):
    """An action map that never returns blocks its call within the deadline; another session
    runs meanwhile, and halt on the hung session is answered at once after its deadline."""
    tools_a, tools_b = Tools(), Tools()

    def hang_action(tool, arguments):
        if arguments.get("invoice") == "HANG":
            time.sleep(30)
        return PHI.action(tool, arguments)

    a = guarded(tools_a.mapping(), shield, PHI.phi, action_map=hang_action, timeout_s=2.0)
    b = guarded(tools_b.mapping(), shield, PHI.phi, action_map=hang_action, timeout_s=2.0)
    outcome: dict = {}

    def hung() -> None:
        start = time.monotonic()
        try:
            a.lookup_invoice(invoice="HANG")
        except ShieldBlocked as exc:
            outcome["a"] = (str(exc), time.monotonic() - start)

    t = threading.Thread(target=hung)
    t.start()
    time.sleep(0.05)
    for _ in range(5):
        b.lookup_invoice(invoice="INV-2")
    b_done_while_a_hangs = "a" not in outcome
    t.join(10)
    message, waited = outcome["a"]
    assert "DeadlineExceeded" in message and 1.9 < waited < 30  # its deadline, not never
    assert b_done_while_a_hangs and len(tools_b.record) == 5  # B never waited for A's φ
    assert tools_a.record == []

    # φ that raises after an executed call: the session ends (state unknown), nothing more runs
    tools_c = Tools()

    def fragile(history):
        if history:
            raise RuntimeError("cannot parse")
        return PHI.phi(history)

    c = guarded(tools_c.mapping(), shield, fragile, action_map=PHI.action)
    c.lookup_invoice(invoice="INV-3")
    assert "abstraction failed" in (c.session.ended or "")
    with pytest.raises(ShieldBlocked, match="session ended"):
        c.lookup_invoice(invoice="INV-3")
    assert len(tools_c.record) == 1


def test_certificate_digests_are_enforced(tmp_path):
    folder = tmp_path / "cert"
    shutil.copytree(CERT.parent, folder)
    load_certified_shield(folder / "certificate.json")  # untouched: loads
    table = json.loads((folder / "shield.json").read_text())
    table["{looked_up}"].append("pay_large")
    (folder / "shield.json").write_text(json.dumps(table))
    with pytest.raises(DataError, match="does not match the certificate's shield digest"):
        load_certified_shield(folder / "certificate.json")
    shutil.copy(CERT.parent / "shield.json", folder / "shield.json")
    with (folder / "model.toml").open("a") as fh:
        fh.write("\n# edited\n")
    with pytest.raises(DataError, match="model-copy digest"):
        load_certified_shield(folder / "certificate.json")


def test_abstraction_outside_the_model_blocks(shield):
    tools = Tools()
    g = guarded(tools.mapping(), shield, lambda h: "somewhere", action_map=PHI.action)
    with pytest.raises(ShieldBlocked, match="outside the model"):
        g.lookup_invoice(invoice="INV-1")
    g2 = guarded(tools.mapping(), shield, PHI.phi)  # no action map: "pay" is not a model action
    with pytest.raises(ShieldBlocked, match="unknown action 'pay'"):
        g2.pay(invoice="INV-1", amount=1)
    assert tools.record == []


def test_sandbox_guard_never_holds_its_lock_while_the_abstraction_runs():
    """The check-only Guard of the bundled sandbox: a hung abstraction blocks its own check until
    the deadline (fail closed); halt and other checks are answered meanwhile."""
    from safecert.shield.guard import Guard

    release = threading.Event()
    calls = [0]

    def abstraction() -> str:
        calls[0] += 1
        if calls[0] == 1:
            release.wait(30)  # the first check hangs
        return "{}"

    guard = Guard({"{}": {"read"}}, abstraction, actions=["read", "halt"], timeout_s=2.0)
    out: dict = {}
    t = threading.Thread(target=lambda: out.setdefault("hung", guard.check("read")))
    t.start()
    time.sleep(0.05)
    assert guard.check("halt").allowed and guard.check("read").allowed
    assert "hung" not in out  # answered while the first check still waits: not serialised
    t.join(10)
    release.set()
    assert not out["hung"].allowed and "DeadlineExceeded" in out["hung"].reason
    assert guard.checks == 3 and guard.blocked == 1


def test_a_session_ended_by_phi_failing_leaves_a_log_that_still_certifies(shield, tmp_path):
    steps = JsonlSink(tmp_path / "steps.jsonl")
    tools = Tools()

    def fragile(history):
        if len(history) == 2:
            raise RuntimeError("cannot parse")
        return PHI.phi(history)

    g = guarded(tools.mapping(), shield, fragile, action_map=PHI.action, steps_log=steps)
    g.lookup_invoice(invoice="INV-1")
    g.request_approval(invoice="INV-1")  # executed; φ fails afterwards: the session ends
    with pytest.raises(ShieldBlocked, match="session ended"):
        g.lookup_invoice(invoice="INV-1")
    steps.close()
    lines = [json.loads(x) for x in (tmp_path / "steps.jsonl").read_text().splitlines()]
    assert [x["action"] for x in lines] == ["lookup"]  # no invented step, no invented halt
    run = certify_shield(CERT.parent / "model.toml", tmp_path / "steps.jsonl", tmp_path / "c")
    assert run.certificate.result.steps == 1


def test_a_mutating_action_map_or_tool_changes_nothing_another_party_sees(shield):
    """The caller's arguments (what the tool is given), the Python action map's (user code on a
    worker) and the session's record (the decision, the history φ reads) are three objects: a map
    that rewrites its arguments, as it runs and again after it returned, changes neither what the
    tool is given nor the record; a tool that rewrites its arguments does not change the record
    (two copies per check: one cannot keep three parties apart)."""
    from safecert.shield.abstraction import Abstraction
    from safecert.shield.session import GuardSession

    def text(value: dict) -> str:
        return json.dumps(value, sort_keys=True)

    kept, seen_by_map, seen_by_phi, given_to_tool = [], [], [], []

    def action(tool: str, arguments: dict) -> str:
        seen_by_map.append(text(arguments))
        arguments["invoice"] = "EVIL"
        arguments["meta"]["tags"].append("by the map")
        kept.append(arguments)
        return PHI.action(tool, arguments)

    def phi(history: list[dict]) -> dict:
        seen_by_phi.append([text(call["arguments"]) for call in history])
        return PHI.phi(history)

    session = GuardSession(shield, Abstraction(shield.model, phi, action))
    arguments = {"invoice": "INV-1", "meta": {"tags": ["a"]}}
    original = text(arguments)

    def execute() -> dict:
        given_to_tool.append(text(arguments))
        arguments["invoice"] = "CHANGED"  # the tool rewrites what it was given
        arguments["meta"]["tags"].append("by the tool")
        return {"found": True}

    assert session.call("lookup_invoice", arguments, execute) == {"found": True}
    for later in kept:  # the map kept its arguments and rewrites them after it returned
        later["meta"]["tags"].append("later")
        later["late"] = True
    assert seen_by_map == given_to_tool == [original]
    assert seen_by_phi[-1] == [original]
    assert text(session.history[0]["arguments"]) == original
    second = session.decide("request_approval", {"invoice": "INV-2", "meta": {"tags": []}})
    assert second.allowed and len(kept) == 2
    assert text(session.history[0]["arguments"]) == original  # the record is still what ran
