"""Transcripts → step logs (``shield ingest``), synthesis that does not silently wall in the agent,
and the OpenAI Agents SDK adapter driving real function tools through the SDK's own Runner."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from safecert.shield.certify import load_inputs
from safecert.shield.synthesis import _greedy, goal_reachable, synthesize
from tests.conftest import run_cli
from tests.shield.payments_support import CERT, PAYMENTS, copy_payments, payments_phi

PHI = payments_phi()


def _chat(cid: str, calls: list[tuple[str, dict, object]]) -> dict:
    messages: list[dict] = [{"role": "user", "content": "settle it"}]
    for i, (name, args, result) in enumerate(calls):
        messages.append(
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"{cid}-{i}", "type": "function",
                 "function": {"name": name, "arguments": json.dumps(args)}}]}
        )  # fmt: skip
        messages.append(
            {"role": "tool", "tool_call_id": f"{cid}-{i}", "content": json.dumps(result)}
        )
    return {"id": cid, "messages": messages}


def test_ingest_writes_the_steps_phi_defines(tmp_path):
    work = copy_payments(tmp_path)
    chats = [
        _chat("a", [("lookup_invoice", {"invoice": "X"}, {"found": True}),
                    ("pay", {"invoice": "X", "amount": 10}, {"status": "paid"}),
                    ("pay", {"invoice": "X", "amount": 10}, {"status": "paid"})]),
        _chat("b", [("request_approval", {"invoice": "Y"}, {"approved": False}),
                    ("pay", {"invoice": "Y", "amount": 4000}, {"status": "paid"})]),
    ]  # fmt: skip
    (work / "chats.jsonl").write_text("\n".join(json.dumps(c) for c in chats) + "\n")
    res = run_cli(
        "shield", "ingest", "--model", "model.toml", "--abstraction", "phi:phi",
        "--action-map", "phi:action", "--transcripts", "chats.jsonl", "--out", "steps.jsonl",
        "--json", cwd=work,
    )  # fmt: skip
    assert res.code == 0, res.stderr
    assert res.json() == {"conversations": 2, "steps": 5, "out": "steps.jsonl"}
    steps = [json.loads(line) for line in (work / "steps.jsonl").read_text().splitlines()]
    f, t = False, True
    expected = [  # written out by hand: (episode, t, action, next_state predicates)
        ("a", 0, "lookup", dict(looked_up=t, approved=f, paid=f, harm=f)),
        ("a", 1, "pay_small", dict(looked_up=t, approved=f, paid=t, harm=f)),
        ("a", 2, "pay_small", dict(looked_up=t, approved=f, paid=t, harm=t)),  # duplicate = harm
        ("b", 0, "request_approval", dict(looked_up=f, approved=f, paid=f, harm=f)),
        ("b", 1, "pay_large", dict(looked_up=f, approved=f, paid=t, harm=t)),  # unapproved
    ]
    got = [(s["episode"], s["t"], s["action"], s["next_state"]) for s in steps]
    assert got == expected
    assert all(steps[i + 1]["state"] == steps[i]["next_state"] for i in (0, 1, 3))

    # the log feeds certify as is; a call without its result is one line, exit 2
    assert run_cli("shield", "certify", "--model", "model.toml", "--logs", "steps.jsonl",
                   "--out", "c", cwd=work).code == 0  # fmt: skip
    broken = _chat("c", [("pay", {"invoice": "Z", "amount": 1}, {"status": "paid"})])
    broken["messages"].pop()  # drop the tool result
    (work / "bad.jsonl").write_text(json.dumps(broken) + "\n")
    res = run_cli("shield", "ingest", "--model", "model.toml", "--abstraction", "phi:phi",
                  "--transcripts", "bad.jsonl", "--out", "x.jsonl", cwd=work)  # fmt: skip
    assert res.code == 2 and "bad.jsonl:1" in res.stderr and "no tool result" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    res = run_cli("shield", "ingest", "--model", "model.toml", "--abstraction", "nosuch:phi",
                  "--transcripts", "chats.jsonl", "--out", "x.jsonl", cwd=work)  # fmt: skip
    assert res.code == 2 and "--abstraction" in res.stderr and "Traceback" not in res.stderr


def test_greedy_falls_back_to_additive_when_it_would_lose_the_goal():
    model, est = load_inputs(PAYMENTS / "model.toml", PAYMENTS / "steps.jsonl")
    res = synthesize(model, est, 0.2, method="greedy")
    from safecert.shield.reach import robust_rows
    from safecert.shield.synthesis import reference_occupancy

    rows = robust_rows(model, est)
    plain, _ = _greedy(model, rows, 0.2, reference_occupancy(model, rows, est) + 1e-3)
    assert goal_reachable(model, rows, plain) is False  # greedy alone walls the agent in
    assert res.fell_back_to == "additive" and res.goal_reachable is True
    assert res.bound <= 0.2
    table = {model.labels[s]: {model.actions[a] for a in range(len(model.actions)) if res.allowed[s, a]}
             for s in range(model.n_states)}  # fmt: skip
    assert "pay_small" in table["{}"]  # a payment straight from s0 reaches the goal


def test_synthesize_exits_1_when_the_goal_is_unreachable_and_lists_short_rows(tmp_path):
    args = ("shield", "synthesize", "--model", str(PAYMENTS / "model.toml"), "--logs",
            str(PAYMENTS / "steps.jsonl"), "--epsilon", "0.1", "--json")  # fmt: skip
    res = run_cli(*args, "--out", str(tmp_path / "a"))
    assert res.code == 1
    assert any(line.startswith("goal unreachable") for line in res.stderr.splitlines())
    ok = run_cli(*args, "--out", str(tmp_path / "b"), "--allow-goal-unreachable")
    assert ok.code == 0 and ok.json()["goal_reachable"] is False
    # rows short of budget, counted from the raw log independently
    visits: Counter = Counter()
    for line in (PAYMENTS / "steps.jsonl").read_text().splitlines():
        s = json.loads(line)
        st = s["state"]
        name = "{" + ",".join(p for p in ("looked_up", "approved", "paid", "harm") if st[p]) + "}"
        visits[(name, s["action"])] += 1
    data = ok.json()
    expected = sorted(
        f"({r['state']}, {r['action']}) {visits[(r['state'], r['action'])]}/{r['n0']}"
        for r in data["rows"] if visits[(r["state"], r["action"])] < r["n0"]
    )  # fmt: skip
    assert sorted(data["short_of_budget"]) == expected
    assert len(expected) == data["missed_budget"] > 0
    assert "short of their budget" in ok.stderr


def test_openai_agents_sdk_adapter_blocks_function_tools(tmp_path):
    """The SDK's real Runner and FunctionTools; the model is a scripted ``agents.Model`` (no
    network): it proposes an unapproved large payment, a small one, a duplicate, then halts."""
    agents = pytest.importorskip("agents")
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    from safecert.shield.adapters import guard_function_tools, guarded

    executed: list[tuple[str, float]] = []

    @agents.function_tool
    def pay(invoice: str, amount: float) -> str:
        """Pay an invoice."""
        executed.append((invoice, amount))
        return json.dumps({"status": "paid"})

    class Scripted(Model):
        def __init__(self, calls: list[tuple[str, dict]]) -> None:
            self.calls, self.outputs = list(calls), []

        async def get_response(self, system_instructions, input, *args, **kwargs):
            if isinstance(input, list):
                self.outputs = [
                    i["output"] for i in input if i.get("type") == "function_call_output"
                ]
            if self.calls:
                name, arguments = self.calls.pop(0)
                call = ResponseFunctionToolCall(type="function_call", call_id=f"c{len(self.calls)}",
                                                name=name, arguments=json.dumps(arguments))  # fmt: skip
                return ModelResponse(output=[call], usage=Usage(), response_id=None)
            text = ResponseOutputText(type="output_text", text="done", annotations=[])
            message = ResponseOutputMessage(id="m", type="message", role="assistant",
                                            status="completed", content=[text])  # fmt: skip
            return ModelResponse(output=[message], usage=Usage(), response_id=None)

        def stream_response(self, *args, **kwargs):
            raise NotImplementedError

    agents.set_tracing_disabled(True)  # no trace export: nothing leaves the machine
    session = guarded({}, CERT, PHI.phi, action_map=PHI.action, steps_log=tmp_path / "s.jsonl")
    model = Scripted([("pay", {"invoice": "I", "amount": 5000}), ("pay", {"invoice": "I", "amount": 9}),
                      ("pay", {"invoice": "I", "amount": 9}), ("halt", {})])  # fmt: skip
    agent = agents.Agent(
        name="payer", model=model, tools=guard_function_tools([pay], session.session)
    )
    result = agents.Runner.run_sync(agent, "pay invoice I", max_turns=10)
    assert result.final_output == "done"
    assert executed == [("I", 9.0)]
    assert [o.split(":")[0] for o in model.outputs] == [
        "blocked by shield",
        '{"status"',
        "blocked by shield",
        "session halted after 1 executed calls",
    ]
    assert session.session.ended == "halt"
    lines = Path(tmp_path / "s.jsonl").read_text().splitlines()
    assert [json.loads(x)["action"] for x in lines] == ["pay_small", "halt"]


def test_any_chat_model_drives_guarded_tools_and_its_transcript_ingests(tmp_path):
    """``run_chat`` against a real chat-completions server on 127.0.0.1 (a rule-based model that
    tries an unapproved large payment, pays, pays again, calls a tool that does not exist, halts).
    The conversation it returns ingests to exactly the steps the guard logged."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from safecert.shield.adapters import guarded
    from safecert.shield.ingest import ingest
    from safecert.shield.llm import ChatClient, run_chat
    from safecert.shield.session import Abstraction

    plan = [("pay", {"invoice": "I", "amount": 5000}), ("pay", {"invoice": "I", "amount": 20}),
            ("pay", {"invoice": "I", "amount": 20}), ("wire_money", {"to": "x"}), ("halt", {})]  # fmt: skip
    seen_tools: list[list[str]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen_tools.append([t["function"]["name"] for t in body["tools"]])
            turn = sum(m["role"] == "assistant" for m in body["messages"])
            name, args = plan[turn]
            call = {"id": f"c{turn}", "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)}}  # fmt: skip
            reply = {"choices": [{"message": {"role": "assistant", "content": None,
                                              "tool_calls": [call]}}]}  # fmt: skip
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    paid: list[float] = []

    def pay(invoice: str, amount: float) -> dict:
        paid.append(amount)
        return {"status": "paid", "amount": amount}

    schemas = [{"type": "function", "function": {"name": "pay", "parameters": {
        "type": "object", "properties": {"invoice": {"type": "string"},
                                         "amount": {"type": "number"}}}}}]  # fmt: skip
    try:
        tools = guarded({"pay": pay}, CERT, PHI.phi, action_map=PHI.action,
                        steps_log=tmp_path / "guard.jsonl")  # fmt: skip
        client = ChatClient(f"http://127.0.0.1:{server.server_port}/v1", "m", tools=tuple(schemas))
        messages = run_chat(client, tools, [{"role": "user", "content": "pay I"}])
    finally:
        server.shutdown()
    assert paid == [20]
    replies = [m["content"] for m in messages if m["role"] == "tool"]
    assert replies[0].startswith("blocked by shield") and "pay_large" in replies[0]
    assert json.loads(replies[1]) == {"status": "paid", "amount": 20}
    assert replies[2].startswith("blocked by shield") and "pay_small" in replies[2]
    assert replies[3].startswith("blocked by shield") and "no tool named 'wire_money'" in replies[3]
    assert replies[4] == "null" and tools.session.ended == "halt"
    assert seen_tools[0] == ["pay"]
    # the transcript of the chat, ingested, gives the step the guard logged (halt line aside)
    (tmp_path / "chat.jsonl").write_text(json.dumps({"id": "x", "messages": messages}) + "\n")
    abstraction = Abstraction(tools.session.shield.model, PHI.phi, PHI.action)
    summary = ingest(tmp_path / "chat.jsonl", tmp_path / "steps.jsonl", abstraction)
    assert summary.steps == 1  # blocked calls never executed: not steps

    def rows(path):
        lines = path.read_text().splitlines()
        return [{k: v for k, v in json.loads(x).items() if k != "episode"} for x in lines]

    assert rows(tmp_path / "steps.jsonl") == rows(tmp_path / "guard.jsonl")
    assert [r["action"] for r in rows(tmp_path / "guard.jsonl")] == ["pay_small", "halt"]
