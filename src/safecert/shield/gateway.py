"""``safecert shield serve``: an MCP gateway that enforces a certified shield on an upstream server.

The gateway is an MCP server (the official ``mcp`` SDK) in front of one upstream MCP server process
(:class:`Upstream`: started from ``--upstream`` under the vendor supervisor, spoken to over stdio).
It lists the upstream's tools plus the model's halt action as a tool, and answers every
``tools/call`` through a :class:`safecert.shield.session.GuardSession` of the calling MCP session:

* a permitted call is forwarded and the upstream's result returned unchanged;
* a blocked call is **not forwarded**; it returns a tool error (``isError``) whose text begins
  ``blocked by shield`` and lists the permitted actions;
* calling the halt tool ends the session (never forwarded).

Check and execution are atomic per session (a per-session async lock is held from the decision
until the executed call is recorded); sessions are independent (one guard session each, keyed by
the MCP session). ``φ`` and a Python action map run in worker threads under their deadline (a
rules-file action map is our own bounded code and runs on the loop), so neither they nor the
upstream ever hold anything another session needs. An upstream call that fails at the
protocol level, passes ``upstream_timeout_s`` or is cut by the upstream's death ends its session:
whether it executed is unknown, so the state is unknown, and the guard fails closed. Anything
unexpected blocks.

On stdio ``tools/call`` takes a raw path (:meth:`Gateway.stdio_intercept`) instead of the SDK's
server and client: the client's line is parsed once, the decision made on what was parsed, the
same ``name`` and ``arguments`` written to the upstream under an id of ours
(:meth:`Upstream.call_tool`), and the upstream's result written back as it came under the client's
id — as soon as the upstream answered; φ of the new history is evaluated after that, with the
session still locked, so the next decision sees it. ``initialize``, the tool list and everything
else stay with the SDK. Over HTTP the SDK's server answers and the same :meth:`Gateway.tool_call`
decides and forwards.

How it is run (signals, exit codes, the transports): :mod:`safecert.shield.serve`; the upstream
process: :mod:`safecert.shield.upstream`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from safecert.shield.certified import CertifiedShield
from safecert.shield.deadline import LOOP_WAIT_S, wait_on_loop
from safecert.shield.session import (
    BLOCKED_PREFIX,
    Abstraction,
    Decision,
    GuardSession,
    JsonlSink,
    OnBlock,
    decode_result,
)
from safecert.shield.stdio_framing import Wire
from safecert.shield.upstream import ToolReply, Upstream, first_cause


def mcp_result_value(result: Any) -> Any:
    """What φ sees as the ``result`` of an upstream ``CallToolResult``: its structured content
    when present, else its text (decoded as JSON when it is JSON)."""
    if result.structured_content is not None:
        return result.structured_content
    return decode_result("".join(getattr(c, "text", "") for c in result.content))


def _text(message: str, error: bool) -> dict[str, Any]:
    """A ``CallToolResult`` of one text, as JSON."""
    return {"content": [{"type": "text", "text": message}], "isError": error}


@dataclass
class Gateway:
    """The shield between MCP clients and one upstream MCP session (module docstring)."""

    shield: CertifiedShield
    abstraction: Abstraction
    upstream: Upstream
    on_block: OnBlock = "ask_again"
    steps_log: JsonlSink | None = None
    audit_log: JsonlSink | None = None
    upstream_timeout_s: float = 30.0
    sessions: dict[int, tuple[Any, GuardSession]] = field(default_factory=dict)
    closing: bool = False  # set on SIGTERM/SIGINT: no new call is forwarded
    in_flight: int = 0
    counts: dict[tuple[str, str], int] = field(default_factory=dict)  # (outcome, reason) -> n
    stdio: Wire | None = None  # the stdio connection, when serving one

    @property
    def _names(self) -> set[str]:
        return {t.name for t in self.upstream.tools}

    async def drain(
        self,
        grace_s: float,
        hurry: Callable[[], bool] = lambda: False,
        busy: Callable[[], bool] = lambda: False,
    ) -> bool:
        """Refuse new calls and wait up to ``grace_s`` (or until ``hurry()``) for the calls in
        flight and, while ``busy()``, for their answers to be written; whether all ended."""
        import anyio

        self.closing = True
        with anyio.move_on_after(grace_s):
            while (self.in_flight or busy()) and not hurry():
                await anyio.sleep(0.01)
        return self.in_flight == 0 and not busy()

    def server(self) -> Any:
        """The low-level MCP server answering ``tools/list`` and ``tools/call``."""
        from mcp.server import Server

        return Server("safecert-shield", on_list_tools=self._list, on_call_tool=self._call)

    def _session(self, ctx: Any) -> GuardSession | None:
        """The guard session of the MCP connection ``ctx`` belongs to; ``None`` when the client made
        no initialize handshake (a stateless request has no session whose history could be
        counted, so it is blocked)."""
        if ctx.session.client_params is None:
            return None
        if self.stdio is not None:  # one connection: the raw path's session, whichever path
            return self._keyed_session(self.stdio)
        connection = getattr(ctx.session, "_connection", None)  # the SDK's per-connection object
        if connection is None:
            return None
        return self._keyed_session(connection)

    def _keyed_session(self, connection: object) -> GuardSession:
        """The one guard session of ``connection`` (an SDK connection, or a stdio wire). An SDK
        connection's session is forgotten when the SDK tears the connection down (the client's
        ``DELETE``, the SDK's idle timeout): no request can reach it after that, and a call still
        in flight keeps the object it holds."""
        key = id(connection)
        if key not in self.sessions:
            gs = GuardSession(
                self.shield,
                self.abstraction,
                on_block=self.on_block,
                steps_log=self.steps_log,
                audit_log=self.audit_log,
            )
            # the connection is kept so its id is not reused while we remember it
            self.sessions[key] = (connection, gs)
            stack = getattr(connection, "exit_stack", None)  # an SDK connection's own teardown
            if stack is not None:  # the session ended (DELETE, idle timeout, shutdown): forget it
                stack.callback(self.sessions.pop, key, None)
        return self.sessions[key][1]

    async def _list(self, ctx: Any, params: Any) -> Any:
        import mcp_types as types

        halt = self.shield.halt
        tools = [t for t in self.upstream.tools if t.name != halt]
        tools.append(
            types.Tool(
                name=halt,
                description="End this session (always permitted; nothing more can be called).",
                input_schema={"type": "object", "properties": {}},
            )
        )
        return types.ListToolsResult(tools=tools)

    async def _call(self, ctx: Any, params: Any) -> Any:
        """``tools/call`` through the SDK's server (streamable HTTP; on stdio only a line
        ``orjson`` could not parse). Arguments that JSON cannot carry exactly (``NaN``,
        ``Infinity``, integers past 64 bits: the SDK's parser takes them) are refused, so the
        upstream is never sent other arguments than those decided on."""
        import mcp_types as types
        from mcp import MCPError

        arguments = dict(params.arguments or {})
        try:
            exact = orjson.loads(orjson.dumps(arguments)) == arguments
        except (TypeError, orjson.JSONEncodeError):
            exact = False
        if not exact:
            raise MCPError(-32602, "Invalid params", "arguments must be exact JSON (no NaN)")
        out = await self.tool_call(self._session(ctx), params.name, arguments)
        return (
            out.result if isinstance(out, ToolReply) else types.CallToolResult.model_validate(out)
        )

    def stdio_intercept(self, wire: Wire, spawn: Callable[..., Any]) -> Callable[[Any], bool]:
        """The raw ``tools/call`` path of a stdio connection (the ``intercept`` of
        :func:`safecert.shield.stdio_framing.jsonrpc_lines`): every JSON object whose ``method``
        is ``tools/call`` is taken from the SDK and answered by :meth:`_raw_call`, started with
        ``spawn``: one parse of the line, the decision, the upstream's answer written back as it
        came under the client's id. The connection has one guard session: the SDK's server sees
        a ``tools/call`` only in a line ``orjson`` cannot parse (``NaN``: :meth:`_call` refuses
        it), and would decide with the same session (:meth:`_session`). Everything else (``initialize``, lists,
        notifications, lines that are not JSON objects, batches) is the SDK's."""

        self.stdio = wire

        def take(message: Any) -> bool:
            if type(message) is not dict or message.get("method") != "tools/call":
                return False
            if "id" in message:  # a notification is never answered, never forwarded
                wire.took()  # counted before the next line is considered (back-pressure)
                spawn(self._raw_call, wire, message)
            return True

        return take

    async def _raw_call(self, wire: Wire, message: dict[str, Any]) -> None:
        """Answer one ``tools/call`` request of a stdio connection (:meth:`stdio_intercept`). Its
        φ and action map are waited for on the loop's thread first (:func:`wait_on_loop`): the
        connection's calls are one at a time, so the loop has nothing else to do meanwhile."""
        try:
            await self._raw_answer(wire, message)
        finally:
            wire.finished()

    async def _raw_answer(self, wire: Wire, message: dict[str, Any]) -> None:
        wait_on_loop(LOOP_WAIT_S)
        rid = message["id"]
        if type(rid) not in (int, str) or message.get("jsonrpc") != "2.0":
            error = {"code": -32600, "message": "Invalid Request", "data": "id or jsonrpc"}
            await wire.send({"jsonrpc": "2.0", "id": None, "error": error})
            return
        params = message.get("params")
        bad = _bad_call_params(params)
        if bad or not isinstance(params, dict):  # (the second: for the type checker)
            error = {"code": -32602, "message": "Invalid params", "data": bad}
            await wire.send({"jsonrpc": "2.0", "id": rid, "error": error})
            return
        sent: list[bool] = []

        def early(reply: ToolReply) -> None:  # in the upstream pipe's callback: no loop trip
            sent.append(True)
            wire.write({"jsonrpc": "2.0", "id": rid, "result": reply.json})

        async def answer(result: dict[str, Any]) -> None:
            if not sent:
                sent.append(True)
                wire.write({"jsonrpc": "2.0", "id": rid, "result": result})
            await wire.drain()

        gs = self._keyed_session(wire) if wire.initialized else None
        arguments = params.get("arguments")
        out = await self.tool_call(gs, params["name"], arguments or {}, answer, early)
        if not sent:
            await answer(out.json if isinstance(out, ToolReply) else out)

    async def tool_call(
        self,
        gs: GuardSession | None,
        name: str,
        arguments: dict[str, Any],
        answer: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
        early: Callable[[ToolReply], None] | None = None,
    ) -> ToolReply | dict[str, Any]:
        """One ``tools/call`` of the session ``gs`` (``None``: no session, blocked): the
        upstream's reply when it was forwarded, else the JSON of a text ``CallToolResult``. With
        ``answer``, a forwarded result's JSON is handed to it as soon as the upstream answered,
        before φ of the new history is evaluated (the session stays locked until it is); with
        ``early`` too, the reply is handed to ``early`` in the upstream pipe's data callback
        before that (:meth:`Upstream.call_tool`)."""
        if gs is None:
            self._count("blocked", "no_session")
            return _text(
                f"{BLOCKED_PREFIX}: no MCP session (the shield counts calls per session; "
                "initialize a session first)",
                True,
            )
        if self.closing:
            self._count("blocked", "shutting_down")
            return _text(f"{BLOCKED_PREFIX}: the gateway is shutting down; not forwarded", True)
        self.in_flight += 1
        try:
            return await self._guarded_call(gs, name, arguments, answer, early)
        finally:
            self.in_flight -= 1

    def _count(self, outcome: str, reason: str = "") -> None:
        key = (outcome, reason)
        self.counts[key] = self.counts.get(key, 0) + 1

    def metrics(self) -> str:
        """Counters in the Prometheus text format: ``tools/call`` requests by outcome
        (``forwarded``, ``halt``, ``blocked`` by reason, ``upstream_error`` by cause), the
        upstream's restarts, whether it is up, and the guard sessions open now."""
        lines = [
            "# HELP safecert_shield_calls_total tools/call requests by outcome and reason",
            "# TYPE safecert_shield_calls_total counter",
        ]
        for (outcome, reason), n in sorted(self.counts.items()):
            labels = f'outcome="{outcome}",reason="{reason}"'
            lines.append(f"safecert_shield_calls_total{{{labels}}} {n}")
        lines += [
            "# TYPE safecert_shield_upstream_restarts_total counter",
            f"safecert_shield_upstream_restarts_total {self.upstream.restarts}",
            "# TYPE safecert_shield_upstream_up gauge",
            f"safecert_shield_upstream_up {int(self.upstream.status == 'up')}",
            "# HELP safecert_shield_sessions MCP sessions open now (each with its guard session)",
            "# TYPE safecert_shield_sessions gauge",
            f"safecert_shield_sessions {len(self.sessions)}",
        ]
        return "\n".join(lines) + "\n"

    async def _guarded_call(
        self,
        gs: GuardSession,
        name: str,
        arguments: dict[str, Any],
        answer: Callable[[dict[str, Any]], Awaitable[None]] | None,
        early: Callable[[ToolReply], None] | None,
    ) -> ToolReply | dict[str, Any]:
        if name != self.shield.halt and not await self.upstream.wait_up(
            self.upstream.start_timeout_s
        ):
            self._count("blocked", "upstream_unavailable")
            return _text(
                f"{BLOCKED_PREFIX}: the upstream is {self.upstream.status}; not forwarded", True
            )
        try:
            out = await gs.acall(
                name,
                arguments,
                lambda: self.upstream.call_tool(name, arguments, self.upstream_timeout_s, early),
                result_value=lambda reply: mcp_result_value(reply.result),
                available=name in self._names or name == self.shield.halt,
                answer=None if answer is None else lambda reply: answer(reply.json),
            )
        except Exception as exc:  # the session has ended: executed or not is unknown
            why = "timed out" if isinstance(exc, TimeoutError) else first_cause(exc)
            self._count("upstream_error", "timeout" if why == "timed out" else type(exc).__name__)
            return _text(f"upstream call failed ({why}); session ended", True)
        if isinstance(out, Decision):
            if not out.allowed:
                self._count("blocked", _reason_kind(out.reason or ""))
                return _text(out.message(), True)
            self._count("halt")
            return _text(f"session halted after {gs.steps} executed calls", False)
        self._count("forwarded")
        return out


def _bad_call_params(params: Any) -> str:
    """Why ``params`` of a ``tools/call`` are not ``{name, arguments?, _meta?}`` ('' when they
    are). Anything else — ``task`` augmentation, a 2026 protocol envelope in ``_meta`` — is
    refused rather than half understood."""
    import mcp_types as types

    if type(params) is not dict:
        return "params must be an object"
    if not isinstance(params.get("name"), str):
        return "params.name must be a string"
    if params.get("arguments") is not None and type(params["arguments"]) is not dict:
        return "params.arguments must be an object"
    extra = set(params) - {"name", "arguments", "_meta"}
    if extra:
        return f"unsupported params {sorted(extra)}"
    meta = params.get("_meta")
    if meta is not None and (type(meta) is not dict or types.PROTOCOL_VERSION_META_KEY in meta):
        return "params._meta must be an object without a protocol version envelope"
    return ""


def _reason_kind(reason: str) -> str:
    """A blocking reason as a metric label (the audit log keeps the full text)."""
    for needle, kind in (
        ("session ended", "session_ended"),
        ("certified horizon", "horizon"),
        ("no tool named", "unknown_tool"),
        ("is forbidden in state", "forbidden"),
        ("the session starts in", "not_initial"),
    ):
        if needle in reason:
            return kind
    return "abstraction_failed"
