"""The gateway's raw ``tools/call`` path on stdio, through real processes: the gateway, its upstream
(the payments tools server, which records what it executed, or a hand-written JSON-RPC upstream
that misbehaves on purpose) and a client that writes JSON-RPC lines itself, byte for byte, so that
lines no SDK client would send can be sent. What was executed is read from the upstream's own
record; every wait has a deadline."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import anyio
import pytest

from tests.shield.payments_support import DEADLINE_S, HORIZON, PAYMENTS, SAFECERT, copy_payments

pytest.importorskip("mcp")

from mcp import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

INIT = {
    "jsonrpc": "2.0", "id": "init", "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "raw-test", "version": "0"}},
}  # fmt: skip

# an upstream that speaks JSON-RPC by hand: it records every tools/call it receives, and on
# request answers with stray ids first, with a JSON-RPC error or with a malformed result
RAW_UPSTREAM = r"""
import json, os, sys
def send(m):
    sys.stdout.write(json.dumps(m) + "\n")
    sys.stdout.flush()
TOOL = {"name": "lookup_invoice", "inputSchema": {"type": "object"}}
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m or "method" not in m:
        continue
    rid, method = m["id"], m["method"]
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}},
            "serverInfo": {"name": "raw", "version": "0"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": [TOOL]}})
    elif method == "tools/call":
        with open(os.environ["PAYMENTS_RECORD"], "a") as fh:
            fh.write(json.dumps(m) + "\n")
        invoice = m["params"]["arguments"].get("invoice")
        if invoice == "STRAY":  # answers for ids nobody asked: ours, and the SDK client's kind
            send({"jsonrpc": "2.0", "id": "safecert-999999", "result": {"content": []}})
            send({"jsonrpc": "2.0", "id": 424242, "result": {}})
        if invoice == "ERROR":
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32000, "message": "boom"}})
            continue
        if invoice == "SLOW":  # answers after the gateway's deadline
            import time
            time.sleep(1.5)
        if invoice == "MALFORMED":
            send({"jsonrpc": "2.0", "id": rid, "result": {"content": "not a list"}})
            continue
        text = json.dumps({"invoice": invoice, "found": True, "id_seen": rid})
        send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": text}]}})
    else:
        send({"jsonrpc": "2.0", "id": rid, "result": {}})
"""


class Gateway:
    """``safecert shield serve`` on stdio as a child process, spoken to in raw JSON-RPC lines."""

    def __init__(
        self,
        work: Path,
        upstream: str = "python tools_server.py",
        abstraction: str = "phi:phi",
        *extra: str,
    ) -> None:
        self.record = work / "record.jsonl"
        argv = [
            *SAFECERT, "shield", "serve", "--certificate", "cert/certificate.json",
            "--upstream", upstream, "--abstraction", abstraction, "--action-map", "actions.toml",
            "--audit-log", "audit.jsonl", "--steps-log", "steps.jsonl", *extra,
        ]  # fmt: skip
        self.work = work
        self.proc = subprocess.Popen(
            argv, cwd=work, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, env={**os.environ, "PAYMENTS_RECORD": str(self.record)},
        )  # fmt: skip
        self.buffer = b""

    def send(self, message: object) -> None:
        line = message if isinstance(message, bytes) else json.dumps(message).encode()
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def reply(self, timeout_s: float = DEADLINE_S) -> dict | None:
        """The next line the gateway writes, parsed; ``None`` if none comes within
        ``timeout_s``."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        end = time.monotonic() + timeout_s
        while b"\n" not in self.buffer:
            left = end - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            assert chunk, "the gateway closed its output"
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def call(self, rid: object, name: str, arguments: object) -> dict:
        self.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                   "params": {"name": name, "arguments": arguments}})  # fmt: skip
        answer = self.reply()
        assert answer is not None and answer["id"] == rid, answer
        return answer

    def start(self) -> Gateway:
        self.send(INIT)
        answer = self.reply()
        assert answer is not None and answer["id"] == "init" and "result" in answer, answer
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return self

    def executed(self) -> list[dict]:
        if not self.record.exists():
            return []
        return [json.loads(x) for x in self.record.read_text().splitlines() if x.strip()]

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            return self.proc.wait(DEADLINE_S)
        finally:
            self.proc.kill()
            self.proc.wait()


def _text(answer: dict) -> str:
    return "".join(c.get("text", "") for c in answer["result"]["content"])


@pytest.fixture
def work(tmp_path: Path) -> Path:
    work = copy_payments(tmp_path)
    shutil.copy(PAYMENTS / "actions.toml", work / "actions.toml")
    (work / "raw_upstream.py").write_text(RAW_UPSTREAM)
    return work


def test_a_forbidden_call_sent_raw_never_reaches_the_upstream_and_ids_come_back(work):
    gw = Gateway(work).start()
    try:
        large = gw.call(7, "pay", {"invoice": "INV-005", "amount": 5000})  # unapproved: blocked
        assert large["result"]["isError"] is True
        assert _text(large).startswith("blocked by shield")
        # a string id spelled like the gateway's own upstream ids, then an integer one
        found = gw.call("safecert-0", "lookup_invoice", {"invoice": "INV-005"})
        assert found["result"].get("isError") is not True
        assert json.loads(_text(found))["invoice"] == "INV-005"
        # a number as a string: the upstream reads "5000" as 5000, so the rules file's
        # "amount gt 1000" cannot tell small from large; blocked, not taken for pay_small
        text = gw.call("s", "pay", {"invoice": "INV-005", "amount": "5000"})
        assert text["result"]["isError"] is True and "not a number" in _text(text), text
        small = gw.call(0, "pay", {"invoice": "INV-005", "amount": 50})
        assert json.loads(_text(small))["status"] == "paid"
        again = gw.call(1, "pay", {"invoice": "INV-005", "amount": 50})  # a second payment
        assert again["result"]["isError"] is True and "forbidden" in _text(again)
        assert gw.close() == 0
    finally:
        gw.proc.kill()
    executed = [(c["tool"], c["arguments"]) for c in gw.executed()]
    assert executed == [
        ("lookup_invoice", {"invoice": "INV-005"}),
        ("pay", {"invoice": "INV-005", "amount": 50}),
    ]
    audit = [json.loads(x) for x in (work / "audit.jsonl").read_text().splitlines()]
    assert [a["allowed"] for a in audit] == [False, True, False, True, False]  # every decision


def test_lines_that_are_not_one_call_are_answered_or_dropped_and_never_forwarded(work):
    pay = {"name": "pay", "arguments": {"invoice": "INV-001", "amount": 50}}
    gw = Gateway(work).start()
    try:
        gw.send(b"this is not json")
        gw.send(b'{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": ')  # cut short
        gw.send({"jsonrpc": "2.0", "method": "tools/call", "params": pay})  # a notification
        gw.send([{"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": pay}])  # a batch
        gw.send({"jsonrpc": "2.0", "id": 77, "result": {}})  # a reply to nothing we asked
        gw.send(b'{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "pay",'
                b' "arguments": {"invoice": "INV-001", "amount": NaN}}}')  # fmt: skip
        refused = {
            6: {"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": ["pay"]},
            7: {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                "params": {"name": "pay", "arguments": [50]}},
            8: {"jsonrpc": "2.0", "id": 8, "method": "tools/call",
                "params": {**pay, "task": {"ttl": 1}}},
            9: {"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                "params": {**pay, "_meta": {"io.modelcontextprotocol/protocolVersion": "x"}}},
        }  # fmt: skip
        for message in refused.values():
            gw.send(message)
        gw.send({"jsonrpc": "2.0", "id": None, "method": "tools/call", "params": pay})
        gw.send({"jsonrpc": "2.0", "id": 10, "method": "ping"})
        answers: dict[object, dict] = {}
        while 10 not in answers:
            answer = gw.reply()
            assert answer is not None, f"no answer to the ping; got {answers}"
            answers[answer.get("id")] = answer
        for rid in (5, *refused):
            assert answers[rid]["error"]["code"] == -32602, answers[rid]
        assert answers[None]["error"]["code"] == -32600
        assert 3 not in answers and 4 not in answers  # malformed and batched: no call made
        assert gw.reply(0.5) is None  # nothing else was answered
        # the session is intact: the first call it decides is the first executed call
        first = gw.call(11, "pay", {"invoice": "INV-001", "amount": 50})
        assert json.loads(_text(first))["status"] == "paid"
        assert gw.close() == 0
    finally:
        gw.proc.kill()
    assert [c["tool"] for c in gw.executed()] == ["pay"]


def test_a_call_before_the_handshake_is_blocked_and_the_horizon_holds_on_the_raw_path(work):
    gw = Gateway(work)
    try:
        early = gw.call(1, "lookup_invoice", {"invoice": "INV-001"})
        assert early["result"]["isError"] is True and "no MCP session" in _text(early)
        gw.start()
        answers = [gw.call(k, "lookup_invoice", {"invoice": "INV-001"}) for k in range(HORIZON)]
        assert all(a["result"].get("isError") is not True for a in answers)
        over = gw.call(99, "lookup_invoice", {"invoice": "INV-001"})
        assert over["result"]["isError"] is True and f"horizon T = {HORIZON}" in _text(over)
        assert gw.close() == 0
    finally:
        gw.proc.kill()
    assert len(gw.executed()) == HORIZON


def test_pipelined_calls_are_decided_in_order_one_at_a_time(work):
    """Eight payments written at once, before any answer: the session's lock makes them one
    step each, in order, so exactly the first is forwarded."""
    gw = Gateway(work).start()
    try:
        lines = [
            json.dumps({"jsonrpc": "2.0", "id": k, "method": "tools/call",
                        "params": {"name": "pay", "arguments": {"invoice": "INV-002",
                                                                "amount": 50}}}).encode()
            for k in range(8)
        ]  # fmt: skip
        gw.send(b"\n".join(lines))
        answers = {}
        for _ in range(8):
            answer = gw.reply()
            assert answer is not None
            answers[answer["id"]] = answer["result"].get("isError") is True
        assert answers == {0: False, **{k: True for k in range(1, 8)}}
        assert gw.close() == 0
    finally:
        gw.proc.kill()
    assert len(gw.executed()) == 1


def test_stray_upstream_answers_errors_and_malformed_results_fail_closed(work):
    gw = Gateway(work, "python raw_upstream.py").start()
    try:
        stray = gw.call(1, "lookup_invoice", {"invoice": "STRAY"})
        assert json.loads(_text(stray))["invoice"] == "STRAY"  # the real answer, not a stray one
        ok = gw.call(2, "lookup_invoice", {"invoice": "INV-001"})
        seen = json.loads(_text(ok))["id_seen"]
        assert isinstance(seen, str) and seen.startswith("safecert-")  # the client's id is not
        error = gw.call(3, "lookup_invoice", {"invoice": "ERROR"})  # sent upstream
        assert error["result"]["isError"] is True and "session ended" in _text(error)
        assert "boom" in _text(error)
        after = gw.call(4, "lookup_invoice", {"invoice": "INV-002"})
        assert "session ended" in _text(after)  # whether ERROR executed is unknown: fail closed
        assert gw.close() == 0
    finally:
        gw.proc.kill()
    gw2 = Gateway(work, "python raw_upstream.py").start()
    try:
        bad = gw2.call(1, "lookup_invoice", {"invoice": "MALFORMED"})
        assert bad["result"]["isError"] is True and "malformed" in _text(bad)
        assert "session ended" in _text(gw2.call(2, "lookup_invoice", {"invoice": "INV-3"}))
        assert gw2.close() == 0
    finally:
        gw2.proc.kill()
    invoices = [c["params"]["arguments"]["invoice"] for c in gw.executed()]
    assert invoices == ["STRAY", "INV-001", "ERROR", "MALFORMED"]  # nothing after an end


def test_two_http_sessions_with_the_same_request_ids_each_get_their_own_answers(work):
    """Both SDK clients number their requests alike; the gateway's upstream ids are its own, so
    every answer reaches the call that asked for it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [
        *SAFECERT, "shield", "serve", "--certificate", "cert/certificate.json",
        "--upstream", "python tools_server.py", "--abstraction", "phi:phi",
        "--action-map", "actions.toml", "--transport", "http", "--port", str(port),
    ]  # fmt: skip
    proc = subprocess.Popen(
        argv, cwd=work, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, env={**os.environ, "PAYMENTS_RECORD": str(work / "r.jsonl")},
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/mcp"
    got: dict[str, list[str]] = {}

    async def session(prefix: str) -> None:
        async with streamable_http_client(url) as st, ClientSession(st[0], st[1]) as s:
            await s.initialize()
            got[prefix] = []
            for k in range(HORIZON):
                res = await s.call_tool("lookup_invoice", {"invoice": f"{prefix}-{k}"})
                got[prefix].append(json.loads(res.content[0].text)["invoice"])

    async def both() -> None:
        with anyio.fail_after(DEADLINE_S):
            async with anyio.create_task_group() as tg:
                tg.start_soon(session, "A")
                tg.start_soon(session, "B")

    try:
        end = time.monotonic() + DEADLINE_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < end
                time.sleep(0.1)
        anyio.run(both)
    finally:
        proc.terminate()
        proc.wait(DEADLINE_S)
    assert got == {p: [f"{p}-{k}" for k in range(HORIZON)] for p in "AB"}


SLOW_PHI = """
import time
from phi import phi as _phi

def phi(history):
    if history:
        time.sleep(0.5)  # φ of a new history takes a while: the answer has gone out before
    return _phi(history)
"""


def test_a_client_leaving_right_after_its_answer_still_gets_its_step_logged(work):
    """The answer is written before φ of the new history is evaluated; a client that closes its
    input as soon as it has it must not cut that evaluation short (the steps log would miss an
    executed call)."""
    (work / "slow.py").write_text(SLOW_PHI)
    gw = Gateway(work, abstraction="slow:phi")
    try:
        gw.start()
        found = gw.call(1, "lookup_invoice", {"invoice": "INV-001"})
        assert json.loads(_text(found))["found"] is True
        assert gw.close() == 0  # closed at once; exit 0 after φ finished
    finally:
        gw.proc.kill()
    steps = [json.loads(x) for x in (work / "steps.jsonl").read_text().splitlines()]
    assert [(s["t"], s["action"]) for s in steps] == [(0, "lookup")]
    assert steps[0]["next_state"] != steps[0]["state"]  # φ of the new history: looked up


def test_an_answer_after_the_upstream_deadline_ends_the_session_and_is_dropped(work):
    gw = Gateway(work, "python raw_upstream.py", "phi:phi", "--upstream-timeout", "0.5")
    gw.start()
    try:
        late = gw.call(1, "lookup_invoice", {"invoice": "SLOW"})
        assert late["result"]["isError"] is True and "timed out" in _text(late)
        time.sleep(2)  # the upstream's late answer arrives meanwhile: taken and dropped
        gw.send({"jsonrpc": "2.0", "id": 2, "method": "ping"})
        assert gw.reply() == {"jsonrpc": "2.0", "id": 2, "result": {}}  # nothing else came out
        after = gw.call(3, "lookup_invoice", {"invoice": "INV-001"})
        assert "session ended" in _text(after)  # SLOW may have executed: fail closed
        assert gw.close() == 0
    finally:
        gw.proc.kill()
    assert [c["params"]["arguments"]["invoice"] for c in gw.executed()] == ["SLOW"]


def _status_kb(pid: int, field: str) -> int:
    """A memory figure of a process (``VmRSS``, ``VmHWM``: its peak), in kB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def test_a_client_writing_without_reading_is_held_back_and_every_request_is_answered(work):
    """10,000 requests (tools/call, every tenth a ping) written without reading an answer: the
    gateway stops reading at its in-flight bound (the client's writes block: back-pressure), so
    its memory stays flat, and once the client reads, every request is answered — the calls past
    the horizon blocked with the reason — and the gateway ends cleanly."""
    n = 10_000
    lines = [
        json.dumps(
            {"jsonrpc": "2.0", "id": k, "method": "ping"}
            if k % 10 == 9
            else {"jsonrpc": "2.0", "id": k, "method": "tools/call",
                  "params": {"name": "lookup_invoice", "arguments": {"invoice": "INV-001"}}}
        ).encode() + b"\n"
        for k in range(n)
    ]  # fmt: skip
    gw = Gateway(work).start()
    try:
        idle_kb = _status_kb(gw.proc.pid, "VmRSS")
        assert gw.proc.stdin is not None
        fd = gw.proc.stdin.fileno()
        written = [0]

        def write_all() -> None:
            for line in lines:
                os.write(fd, line)  # blocks while the pipe is full
                written[0] += 1

        writer = threading.Thread(target=write_all, daemon=True)
        writer.start()
        end = time.monotonic() + DEADLINE_S
        last = -1
        while writer.is_alive() and written[0] != last:  # until it finishes or stalls
            assert time.monotonic() < end
            last = written[0]
            time.sleep(1.0)
        held_at = written[0]
        answers: dict[int, dict] = {}
        while len(answers) < n:
            answer = gw.reply()
            assert answer is not None, f"{len(answers)} of {n} answered, then nothing"
            answers[answer["id"]] = answer
        writer.join(DEADLINE_S)
        peak_kb = _status_kb(gw.proc.pid, "VmHWM")
        assert gw.close() == 0
    finally:
        gw.proc.kill()
    assert held_at < n  # the gateway stopped reading before the client read anything
    assert peak_kb - idle_kb < 16 * 1024, (idle_kb, peak_kb)  # 10,000 tasks took 46 MB
    assert sorted(answers) == list(range(n))
    pings = [a for k, a in answers.items() if k % 10 == 9]
    assert all(a["result"] == {} for a in pings)
    calls = [answers[k] for k in range(n) if k % 10 != 9]
    assert [a["result"].get("isError") is True for a in calls[:HORIZON]] == [False] * HORIZON
    assert all(f"horizon T = {HORIZON}" in _text(a) for a in calls[HORIZON:])
    assert len(gw.executed()) == HORIZON


def test_sigterm_while_a_client_that_does_not_read_holds_the_gateway_back_ends_it(work):
    """The client writes 10,000 calls and reads nothing: the gateway is held at its in-flight
    bound with answers it cannot write. SIGTERM still ends it (143) after its shutdown grace."""
    line = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
         "params": {"name": "lookup_invoice", "arguments": {"invoice": "INV-001"}}}
    ).encode() + b"\n"  # fmt: skip
    gw = Gateway(work).start()
    try:
        assert gw.proc.stdin is not None
        fd = gw.proc.stdin.fileno()
        writer = threading.Thread(
            target=lambda: [os.write(fd, line) for _ in range(10_000)], daemon=True
        )
        writer.start()
        writer.join(3)
        assert writer.is_alive()  # held back: the gateway stopped reading
        gw.proc.send_signal(signal.SIGTERM)
        assert gw.proc.wait(DEADLINE_S) == 128 + signal.SIGTERM
    finally:
        gw.proc.kill()
    assert len(gw.executed()) <= HORIZON  # nothing past the horizon ran meanwhile
