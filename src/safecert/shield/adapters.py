"""The certified shield around tools that are not behind MCP: plain Python callables and the
OpenAI Agents SDK's function tools. Both are thin layers over one
:class:`safecert.shield.session.GuardSession` (same decisions, deadlines, logs as
``safecert shield serve``).

Plain Python::

    tools = guarded([lookup_invoice, request_approval, pay], "runs/pay/certificate.json", phi,
                    action_map=action, steps_log="steps.jsonl")
    tools.pay(invoice="INV-001", amount=120)   # runs, or raises ShieldBlocked
    tools.halt()                               # ends the session

OpenAI Agents SDK (``pip install 'safecert[agents]'``)::

    agent = Agent(name="payer", tools=guard_function_tools([pay_tool, ...], tools.session))

LangChain / LangGraph (``pip install 'safecert[agents]'``)::

    agent = create_agent(model, guard_langchain_tools([pay_tool, ...], tools.session))

A blocked call is not run; the agent sees a message that begins ``blocked by shield`` and lists
the permitted actions (a LangChain ``ToolMessage`` with ``status="error"``), and the halt tool is
added so the agent can end the session.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from safecert.extras import MissingExtraError
from safecert.shield.certified import CertifiedShield, load_certified_shield
from safecert.shield.session import (
    Abstraction,
    Decision,
    GuardSession,
    JsonlSink,
    OnBlock,
    decode_result,
)


class ShieldBlocked(Exception):
    """A guarded call was blocked (not executed); ``decision`` says why and what is permitted."""

    def __init__(self, decision: Decision) -> None:
        self.decision = decision
        super().__init__(decision.message())


class GuardedTools:
    """Python callables behind one guard session: ``tools.NAME(**arguments)`` or
    ``tools.call(NAME, **arguments)`` runs the tool if the shield permits it in the session's
    state (atomically) and raises :class:`ShieldBlocked` otherwise. Thread-safe: calls of one
    session are serialised by the session's lock."""

    def __init__(self, tools: Mapping[str, Callable[..., Any]], session: GuardSession) -> None:
        self.tools = dict(tools)
        self.session = session

    def call(self, name: str, /, **arguments: Any) -> Any:
        """Run tool ``name`` if the shield permits it now; raise :class:`ShieldBlocked` if not (a
        name with no tool is blocked too)."""
        fn = self.tools.get(name)
        out = self.session.call(
            name,
            arguments,
            lambda: fn(**arguments) if fn else None,
            available=fn is not None or name == self.session.halt,
        )
        if isinstance(out, Decision):
            if not out.allowed:
                raise ShieldBlocked(out)
            return None  # halt
        return out

    def halt(self) -> None:
        """End the session (always permitted)."""
        self.call(self.session.halt)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_") or (name not in self.tools):
            raise AttributeError(name)
        return lambda **arguments: self.call(name, **arguments)


def _tool_map(tools: Mapping[str, Callable[..., Any]] | Iterable[Callable[..., Any]]) -> dict:
    if isinstance(tools, Mapping):
        return dict(tools)
    return {fn.__name__: fn for fn in tools}


def guarded(
    tools: Mapping[str, Callable[..., Any]] | Iterable[Callable[..., Any]],
    certificate: Path | str | CertifiedShield,
    phi: Callable[[list[dict[str, Any]]], object],
    *,
    action_map: Callable[[str, dict[str, Any]], object] | None = None,
    on_block: OnBlock = "ask_again",
    timeout_s: float = 2.0,
    steps_log: Path | str | JsonlSink | None = None,
    audit_log: Path | str | JsonlSink | None = None,
) -> GuardedTools:
    """One guarded session over ``tools`` (a mapping name → callable, or callables named by
    ``__name__``) enforcing the shield of ``certificate`` with abstraction ``phi`` (see
    :mod:`safecert.shield.session` for the guarantee). Call again for another session."""
    shield = certificate if isinstance(certificate, CertifiedShield) else (
        load_certified_shield(Path(certificate))
    )  # fmt: skip

    def sink(value: Path | str | JsonlSink | None) -> JsonlSink | None:
        return value if isinstance(value, JsonlSink) or value is None else JsonlSink(Path(value))

    session = GuardSession(
        shield,
        Abstraction(shield.model, phi, action_map, timeout_s),
        on_block=on_block,
        steps_log=sink(steps_log),
        audit_log=sink(audit_log),
    )
    return GuardedTools(_tool_map(tools), session)


# ------------------------------------------------------------------------- OpenAI Agents SDK


def guard_function_tools(tools: list[Any], session: GuardSession) -> list[Any]:
    """The Agents SDK ``FunctionTool`` s ``tools`` behind ``session``, plus a halt tool.

    Each returned tool checks its call with the shield before running the original (atomically,
    :meth:`GuardSession.acall`); a blocked call returns the ``blocked by shield`` message to the
    model instead of running."""
    try:
        from agents import FunctionTool
    except ImportError:
        raise MissingExtraError("agents", "agents") from None

    def wrap(tool: Any) -> Any:
        original = tool.on_invoke_tool

        async def invoke(ctx: Any, raw: str) -> Any:
            try:
                arguments = json.loads(raw or "{}")
            except json.JSONDecodeError:
                arguments = None
            if not isinstance(arguments, dict):
                return f"blocked by shield: arguments of {tool.name!r} are not a JSON object"
            out = await session.acall(
                tool.name, arguments, lambda: original(ctx, raw), result_value=decode_result
            )
            if isinstance(out, Decision):
                return out.message() if not out.allowed else "session halted"
            return out

        return replace(tool, on_invoke_tool=invoke)

    async def halt(ctx: Any, raw: str) -> str:
        await session.acall(session.halt, {}, _never)
        return f"session halted after {session.steps} executed calls"

    halt_tool = FunctionTool(
        name=session.halt,
        description="End this session (always permitted; nothing more can be called).",
        params_json_schema={"type": "object", "properties": {}, "additionalProperties": False},
        on_invoke_tool=halt,
    )
    return [wrap(t) for t in tools if t.name != session.halt] + [halt_tool]


async def _never() -> None:  # halt is decided by the guard and never executed by a tool
    raise AssertionError("halt is never executed")


# ------------------------------------------------------------------------- LangChain / LangGraph


def guard_langchain_tools(tools: list[Any], session: GuardSession) -> list[Any]:
    """LangChain tools (``BaseTool``, e.g. ``@tool`` functions) behind ``session``, plus a halt tool,
    for any LangChain or LangGraph agent (``langchain.agents.create_agent``, LangGraph's
    ``ToolNode``).

    Each returned tool has the original's name, description and argument schema. Its call is
    checked by the shield on the arguments the schema validated, and the original runs only if it is
    permitted — atomically, under the session's lock (:meth:`GuardSession.call` when the agent runs
    the tool synchronously, :meth:`GuardSession.acall` when it awaits it). A blocked call raises
    ``ToolException("blocked by shield: …")``, which the wrapper's ``handle_tool_error`` turns into
    the tool's reply with ``status="error"``, so the model reads the refusal and the permitted
    actions and may try again (``ask_again``) until the session's refusal limit. Calling the halt
    tool ends the session; it is never executed by a tool.

    Example (a scripted model; any chat model with ``bind_tools`` works the same way)::

        session = guarded([], "runs/pay/certificate.json", phi, action_map=action).session
        agent = create_agent(model, guard_langchain_tools([lookup_invoice, pay], session))
        agent.invoke({"messages": [("user", "pay INV-001")]})
    """
    try:
        from langchain_core.tools import StructuredTool, ToolException
    except ImportError:
        raise MissingExtraError("langchain_core", "agents") from None

    def reply(out: Any) -> Any:
        if isinstance(out, Decision):
            if not out.allowed:
                raise ToolException(out.message())
            return f"session halted after {session.steps} executed calls"
        return out

    def wrap(tool: Any) -> Any:
        def run(**arguments: Any) -> Any:
            return reply(session.call(tool.name, arguments, lambda: tool.invoke(arguments)))

        async def arun(**arguments: Any) -> Any:
            out = await session.acall(tool.name, arguments, lambda: tool.ainvoke(arguments))
            return reply(out)

        return StructuredTool.from_function(
            func=run, coroutine=arun, name=tool.name, description=tool.description,
            args_schema=tool.args_schema, handle_tool_error=True,
        )  # fmt: skip

    def halt() -> str:
        """End this session (always permitted; nothing more can be called)."""
        return reply(session.call(session.halt, {}, _never_sync))

    async def ahalt() -> str:
        return reply(await session.acall(session.halt, {}, _never))

    halt_tool = StructuredTool.from_function(
        func=halt, coroutine=ahalt, name=session.halt, handle_tool_error=True
    )
    return [wrap(t) for t in tools if t.name != session.halt] + [halt_tool]


def _never_sync() -> None:  # halt is decided by the guard and never executed by a tool
    raise AssertionError("halt is never executed")
