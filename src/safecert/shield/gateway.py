"""``safecert shield serve``: an MCP gateway that enforces a certified shield on an upstream server.

The gateway is an MCP server (the official ``mcp`` SDK) in front of one upstream MCP server process
(started from ``--upstream``, spoken to over stdio, stopped and reaped when the gateway exits). It
lists the upstream's tools plus the model's halt action as a tool, and answers every ``tools/call``
through a :class:`safecert.shield.session.GuardSession` of the calling MCP session:

* a permitted call is forwarded and the upstream's result returned unchanged;
* a blocked call is **not forwarded**; it returns a tool error (``isError``) whose text begins
  ``blocked by shield`` and lists the permitted actions;
* calling the halt tool ends the session (never forwarded).

Check and execution are atomic per session (a per-session async lock is held from the decision
until the executed call is recorded); sessions are independent (one guard session each, keyed by
the MCP session). ``φ`` and the action map run in worker threads under their deadline, so neither
they nor the upstream ever hold anything another session needs. An upstream call that fails at the
protocol level or passes ``upstream_timeout_s`` ends its session: whether it executed is unknown,
so the state is unknown, and the guard fails closed. Anything unexpected blocks.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from safecert.errors import ConfigError
from safecert.shield.certified import CertifiedShield
from safecert.shield.session import (
    BLOCKED_PREFIX,
    Abstraction,
    Decision,
    GuardSession,
    JsonlSink,
    OnBlock,
    decode_result,
)
from safecert.usercode import split_command

Transport = Literal["stdio", "http"]


def _mcp() -> Any:
    try:
        import mcp
    except ImportError:
        raise ConfigError(
            "the MCP gateway needs the mcp package",
            field="serve",
            fix="pip install 'safecert[agents]'",
        ) from None
    return mcp


def mcp_result_value(result: Any) -> Any:
    """What φ sees as the ``result`` of an upstream ``CallToolResult``: its structured content
    when present, else its text (decoded as JSON when it is JSON)."""
    if result.structured_content is not None:
        return result.structured_content
    return decode_result("".join(getattr(c, "text", "") for c in result.content))


@dataclass
class Gateway:
    """The shield between MCP clients and one upstream MCP session (module docstring)."""

    shield: CertifiedShield
    abstraction: Abstraction
    upstream: Any  # mcp.ClientSession
    upstream_tools: list[Any]
    on_block: OnBlock = "ask_again"
    steps_log: JsonlSink | None = None
    audit_log: JsonlSink | None = None
    upstream_timeout_s: float = 30.0
    sessions: dict[int, tuple[Any, GuardSession]] = field(default_factory=dict)

    @property
    def _names(self) -> set[str]:
        return {t.name for t in self.upstream_tools}

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
        connection = getattr(ctx.session, "_connection", None)  # the SDK's per-connection object
        if connection is None:
            return None
        key = id(connection)
        if key not in self.sessions:
            gs = GuardSession(
                self.shield,
                self.abstraction,
                on_block=self.on_block,
                steps_log=self.steps_log,
                audit_log=self.audit_log,
            )
            # the session object is kept so its id is not reused while we remember it
            self.sessions[key] = (connection, gs)
        return self.sessions[key][1]

    async def _list(self, ctx: Any, params: Any) -> Any:
        import mcp_types as types

        halt = self.shield.halt
        tools = [t for t in self.upstream_tools if t.name != halt]
        tools.append(
            types.Tool(
                name=halt,
                description="End this session (always permitted; nothing more can be called).",
                input_schema={"type": "object", "properties": {}},
            )
        )
        return types.ListToolsResult(tools=tools)

    async def _call(self, ctx: Any, params: Any) -> Any:
        import mcp_types as types

        def text(message: str, error: bool) -> Any:
            return types.CallToolResult(content=[types.TextContent(text=message)], is_error=error)

        gs = self._session(ctx)
        if gs is None:
            return text(
                f"{BLOCKED_PREFIX}: no MCP session (the shield counts calls per session; "
                "initialize a session first)",
                True,
            )
        name, arguments = params.name, dict(params.arguments or {})
        try:
            out = await gs.acall(
                name,
                arguments,
                lambda: self.upstream.call_tool(name, arguments),
                result_value=mcp_result_value,
                timeout_s=self.upstream_timeout_s,
                available=name in self._names or name == self.shield.halt,
            )
        except Exception as exc:  # the session has ended: executed or not is unknown
            why = "timed out" if isinstance(exc, TimeoutError) else type(exc).__name__
            return text(f"upstream call failed ({why}); session ended", True)
        if isinstance(out, Decision):
            if not out.allowed:
                return text(out.message(), True)
            return text(f"session halted after {gs.steps} executed calls", False)
        return out


@dataclass(frozen=True)
class ServeOptions:
    """How ``safecert shield serve`` runs (validated by the CLI)."""

    upstream: str
    transport: Transport = "stdio"
    host: str = "127.0.0.1"
    port: int = 8765
    on_block: OnBlock = "ask_again"
    steps_log: Path | None = None
    audit_log: Path | None = None
    upstream_timeout_s: float = 30.0


def upstream_command(spec: str) -> list[str]:
    """The upstream command line (no shell); ``python`` means this interpreter."""
    return split_command(spec, field="upstream", example='"python tools_server.py"')


async def serve(shield: CertifiedShield, abstraction: Abstraction, opts: ServeOptions) -> None:
    """Start the upstream, then serve MCP on ``opts.transport`` until the client (stdio) or the
    process (HTTP, Ctrl-C) ends; the upstream process is stopped and reaped on every exit."""
    import anyio

    _mcp()
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    argv = upstream_command(opts.upstream)
    params = StdioServerParameters(
        command=argv[0], args=argv[1:], cwd=str(Path.cwd()), env=dict(os.environ)
    )
    sinks = [JsonlSink(p) if p else None for p in (opts.steps_log, opts.audit_log)]
    started = False
    try:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as upstream:
            with anyio.fail_after(opts.upstream_timeout_s):
                await upstream.initialize()
                tools = await _all_tools(upstream)
            started = True
            gateway = Gateway(
                shield, abstraction, upstream, tools, opts.on_block, sinks[0], sinks[1],
                opts.upstream_timeout_s,
            )  # fmt: skip
            server = gateway.server()
            print(
                f"safecert shield serve: {len(tools)} upstream tools behind the shield of "
                f"{shield.certificate_path} ({opts.transport})",
                file=sys.stderr,
                flush=True,
            )
            if opts.transport == "stdio":
                from mcp.server.stdio import stdio_server

                async with stdio_server() as (rs, ws):
                    await server.run(rs, ws, server.create_initialization_options())
            else:
                await _serve_http(server, opts.host, opts.port)
    except Exception as exc:  # the upstream failed: one line, not a traceback
        what = "did not start" if not started else "failed while serving"
        raise ConfigError(
            f"the upstream {' '.join(argv)!r} {what} ({_first_cause(exc)})", field="upstream"
        ) from None
    finally:
        for sink in sinks:
            if sink is not None:
                sink.close()


def _first_cause(exc: BaseException) -> str:
    """The innermost first error of an exception group, as ``Type: message``."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "no answer within the upstream timeout"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def run(shield: CertifiedShield, abstraction: Abstraction, opts: ServeOptions) -> None:
    """:func:`serve` from synchronous code. SIGTERM is turned into KeyboardInterrupt so the
    upstream process is stopped and reaped on every way out."""
    import signal

    import anyio

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    anyio.run(serve, shield, abstraction, opts)


async def _all_tools(upstream: Any) -> list[Any]:
    import mcp_types as types

    tools, cursor = [], None
    while True:
        page = await upstream.list_tools(
            params=types.PaginatedRequestParams(cursor=cursor) if cursor else None
        )
        tools += page.tools
        cursor = page.next_cursor
        if not cursor:
            return tools


async def _serve_http(server: Any, host: str, port: int) -> None:
    import uvicorn

    app = server.streamable_http_app(host=host)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()
