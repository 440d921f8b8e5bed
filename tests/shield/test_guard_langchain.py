"""A LangGraph tool-calling agent (model node, ``ToolNode``, ``tools_condition``) whose LangChain tools are behind the certified shield
of the payments example (``guard_langchain_tools``). The chat model is scripted (LangChain's own
fake chat model emitting tool calls; no network): it tries an unapproved large payment, looks the
invoice up, pays, tries to pay twice and halts. What ran is read from the tools' own record and
replayed against ``shield.json`` independently of the guard."""

from __future__ import annotations

import anyio
import pytest

from safecert.shield.adapters import guard_langchain_tools, guarded
from tests.shield.payments_support import CERT, payments_phi, replay_violations

pytest.importorskip("langchain_core")
pytest.importorskip("langgraph")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import ToolNode, tools_condition  # noqa: E402

SCRIPT = [
    ("pay", {"invoice": "INV-001", "amount": 5000}),  # pay_large, not approved: blocked
    ("lookup_invoice", {"invoice": "INV-001"}),
    ("pay", {"invoice": "INV-001", "amount": 50}),  # pay_small after a look-up: runs
    ("pay", {"invoice": "INV-001", "amount": 50}),  # a second payment: blocked
    ("halt", {}),
]


class ScriptedModel(GenericFakeChatModel):
    """The client side, scripted: one tool call per turn, then a closing text."""

    def bind_tools(self, tools, **kwargs):  # the script already names the tools
        return self


def _model() -> ScriptedModel:
    turns = [
        AIMessage(content="", tool_calls=[{"name": n, "args": a, "id": f"call{i}"}])
        for i, (n, a) in enumerate(SCRIPT)
    ]
    return ScriptedModel(messages=iter([*turns, AIMessage(content="done")]))


def create_agent(model, tools):
    """The ReAct loop as LangGraph builds it: the model, then the tools it called, until it
    answers without a tool call."""
    bound = model.bind_tools(tools)
    graph = StateGraph(MessagesState)
    graph.add_node("model", lambda state: {"messages": [bound.invoke(state["messages"])]})
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph.compile()


def _tools(executed: list[dict]):
    @tool
    def lookup_invoice(invoice: str) -> dict:
        """Look an invoice up."""
        result = {"invoice": invoice, "found": True}
        executed.append(
            {"tool": "lookup_invoice", "arguments": {"invoice": invoice}, "result": result}
        )
        return result

    @tool
    def pay(invoice: str, amount: float) -> dict:
        """Pay an invoice."""
        result = {"invoice": invoice, "amount": amount, "status": "paid"}
        executed.append(
            {"tool": "pay", "arguments": {"invoice": invoice, "amount": amount}, "result": result}
        )
        return result

    return [lookup_invoice, pay]


def _check(messages: list, executed: list[dict], session) -> None:
    replies = [m for m in messages if isinstance(m, ToolMessage)]
    assert [m.name for m in replies] == [n for n, _ in SCRIPT]
    assert [m.status for m in replies] == ["error", "success", "success", "error", "success"]
    assert replies[0].content.startswith("blocked by shield")
    assert (
        "pay_large" in replies[0].content and "lookup" in replies[0].content.split("permitted")[1]
    )
    assert replies[3].content.startswith("blocked by shield")
    assert "session halted after 2 executed calls" in replies[4].content
    # the tools' own record: only the permitted calls ran, each permitted where it ran
    assert [c["tool"] for c in executed] == ["lookup_invoice", "pay"]
    assert replay_violations(executed) == []
    assert session.ended is not None and session.steps == 2


def test_a_langgraph_agent_is_blocked_by_the_certified_shield():
    phi = payments_phi()
    executed: list[dict] = []
    session = guarded([], CERT, phi.phi, action_map=phi.action).session
    agent = create_agent(_model(), guard_langchain_tools(_tools(executed), session))
    out = agent.invoke({"messages": [("user", "Pay invoice INV-001.")]})
    _check(out["messages"], executed, session)
    assert out["messages"][-1].content == "done"


def test_the_same_agent_awaited_goes_through_the_async_session():
    phi = payments_phi()
    executed: list[dict] = []
    session = guarded([], CERT, phi.phi, action_map=phi.action).session
    agent = create_agent(_model(), guard_langchain_tools(_tools(executed), session))

    async def main() -> dict:
        return await agent.ainvoke({"messages": [("user", "Pay invoice INV-001.")]})

    out = anyio.run(main)
    _check(out["messages"], executed, session)


def test_after_halt_nothing_runs_and_the_refusal_names_the_ended_session():
    phi = payments_phi()
    executed: list[dict] = []
    session = guarded([], CERT, phi.phi, action_map=phi.action).session
    wrapped = {t.name: t for t in guard_langchain_tools(_tools(executed), session)}
    assert set(wrapped) == {"lookup_invoice", "pay", "halt"}
    assert wrapped["pay"].args == _tools([])[1].args  # the original schema, unchanged
    wrapped["halt"].invoke({})
    reply = wrapped["lookup_invoice"].invoke(
        {"type": "tool_call", "name": "lookup_invoice", "args": {"invoice": "X"}, "id": "1"}
    )
    assert reply.status == "error" and "session ended" in reply.content
    assert executed == []
