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
the MCP session). ``φ`` and the action map run in worker threads under their deadline, so neither
they nor the upstream ever hold anything another session needs. An upstream call that fails at the
protocol level, passes ``upstream_timeout_s`` or is cut by the upstream's death ends its session:
whether it executed is unknown, so the state is unknown, and the guard fails closed. Anything
unexpected blocks.

Lifecycle (:func:`serve`; exit codes in :data:`EXIT_CODES`): the upstream runs in a process group of
its own under :mod:`safecert.supervisor` (a parent-death signal: ``kill -9`` of the gateway takes
it down). When it dies it is restarted with exponential backoff, at most ``upstream_restarts``
times; calls in flight end their sessions with a tool error, calls arriving meanwhile are refused
without being forwarded, and past the limit the gateway exits with :data:`EXIT_UPSTREAM`. SIGTERM or
SIGINT stops new calls, waits for the calls in flight up to ``grace_s``, stops the upstream and
exits with 128 + the signal; a second signal skips the wait. End of the stdio client's input (or a
closed output) is a normal end: exit 0. Over HTTP ``/healthz`` answers 200 while the upstream is up
and 503 otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from safecert.errors import ConfigError, SafecertError
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

EXIT_UPSTREAM = 3
#: how ``safecert shield serve`` ends
EXIT_CODES = {
    0: "the stdio client closed its connection (end of input, or our output closed)",
    2: "bad input, or the upstream did not start within --upstream-start-timeout",
    EXIT_UPSTREAM: "the upstream died more often than --upstream-restarts allows",
    128 + signal.SIGINT: "SIGINT (after draining calls in flight up to --shutdown-grace)",
    128 + signal.SIGTERM: "SIGTERM (after draining calls in flight up to --shutdown-grace)",
}
LINE_LIMIT = 64 * 1024 * 1024  # the longest JSON-RPC line read (bytes)
BACKOFF_S = (0.1, 5.0)  # first restart delay, doubled per consecutive restart up to the cap
STOP_WAIT_S = 1.5  # after the grace period: how long the transport gets to close


class UpstreamFailed(SafecertError):
    """The upstream died more often than ``upstream_restarts`` allows."""


class UpstreamDied(ConnectionError):
    """The upstream process ended while a call was in flight."""


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


# -- newline-delimited JSON-RPC over pipes ------------------------------------------------------


@contextlib.asynccontextmanager
async def jsonrpc_lines(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> AsyncIterator[tuple[Any, Any, Any]]:
    """MCP's stdio framing (one JSON-RPC message per line) over an asyncio pipe pair, as the
    ``(read_stream, write_stream)`` an MCP session takes, an event set at end of input or when
    the peer stops reading, and a one-item list: the requests read whose response is not written
    yet. Nothing blocks a thread, so cancelling it ends it at once."""
    import anyio
    import mcp_types as types
    from mcp.shared._context_streams import create_context_streams
    from mcp.shared.message import SessionMessage

    in_send, in_recv = create_context_streams[SessionMessage | Exception](0)
    out_send, out_recv = create_context_streams[SessionMessage](0)
    closed = anyio.Event()
    unanswered = [0]

    async def read() -> None:
        try:
            while line := await reader.readline():
                try:
                    msg: Any = SessionMessage(
                        types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                    )
                except ValueError as exc:
                    msg = exc
                else:
                    unanswered[0] += isinstance(msg.message, types.JSONRPCRequest)
                await in_send.send(msg)
        except (OSError, ValueError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # a broken pipe or an oversized line: the connection is over
        finally:
            closed.set()  # before the session hears of it: its failed calls can check
            in_send.close()

    async def write() -> None:
        try:
            async with out_recv:
                async for m in out_recv:
                    data = m.message.model_dump_json(by_alias=True, exclude_unset=True)
                    writer.write(data.encode() + b"\n")
                    await writer.drain()
                    if isinstance(m.message, types.JSONRPCResponse | types.JSONRPCError):
                        unanswered[0] -= 1
        except (OSError, RuntimeError, anyio.ClosedResourceError):
            pass  # the peer stopped reading
        finally:
            closed.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        tg.start_soon(write)
        try:
            yield in_recv, out_send, closed, unanswered
        finally:
            tg.cancel_scope.cancel()
            writer.close()


async def _pipes(read_file: Any, write_file: Any) -> tuple[asyncio.StreamReader, Any]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=LINE_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), read_file)
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, write_file
    )
    return reader, asyncio.StreamWriter(transport, protocol, None, loop)


async def _copy_stderr(pipe: Any) -> None:
    """The upstream's stderr, passed on to ours (it must be read, or the upstream blocks)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    try:
        while chunk := await reader.read(65536):
            with contextlib.suppress(OSError):
                sys.stderr.buffer.write(chunk)
                sys.stderr.buffer.flush()
    finally:
        transport.close()


# -- the upstream process -------------------------------------------------------------------------


@dataclass
class Upstream:
    """One upstream MCP server process at a time, restarted when it dies (module docstring).

    ``state`` is ``starting``, ``up``, ``restarting``, ``failed`` or ``stopped``. Every incarnation
    runs under :class:`safecert.procs.VendorProcess`: its own process group, a subreaper that
    takes its subtree down, a parent-death signal."""

    argv: list[str]
    cwd: str
    start_timeout_s: float = 30.0
    restarts_max: int = 3
    state: str = "starting"
    restarts: int = 0
    tools: list[Any] = field(default_factory=list)
    session: Any = None
    _closed: Any = None  # anyio.Event: its connection ended

    async def run(self, *, task_status: Any) -> None:
        """Start the upstream (``task_status.started()`` once it answered ``initialize`` and
        ``tools/list``), then keep it running. Raises :class:`ConfigError` when the first start
        fails, :class:`UpstreamFailed` past the restart limit."""
        import anyio

        try:
            while True:
                try:
                    await self._incarnation(task_status)
                    why = "exited"
                except Exception as exc:  # a start that failed or a transport that broke
                    if self.restarts == 0 and self.state == "starting":
                        raise ConfigError(
                            f"the upstream {' '.join(self.argv)!r} did not start "
                            f"({_first_cause(exc)})",
                            field="upstream",
                        ) from None
                    why = _first_cause(exc)
                if self.restarts >= self.restarts_max:
                    self.state = "failed"
                    raise UpstreamFailed(
                        f"the upstream {' '.join(self.argv)!r} {why}; "
                        f"{self.restarts} restarts allowed (--upstream-restarts), giving up"
                    )
                self.state = "restarting"
                self.restarts += 1
                delay = min(BACKOFF_S[0] * 2 ** (self.restarts - 1), BACKOFF_S[1])
                print(
                    f"safecert shield serve: the upstream {why}; restart {self.restarts}/"
                    f"{self.restarts_max} in {delay:g} s",
                    file=sys.stderr,
                    flush=True,
                )
                await anyio.sleep(delay)
                task_status = anyio.TASK_STATUS_IGNORED
        finally:
            if self.state != "failed":
                self.state = "stopped"

    async def _incarnation(self, task_status: Any) -> None:
        import anyio
        from mcp import ClientSession

        from safecert.procs import VendorProcess

        # started from this (the event loop's) thread: the supervisor's parent-death signal
        # follows the thread that started it, and a worker thread of anyio's pool comes and goes
        vendor = VendorProcess(self.argv, cwd=self.cwd)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_copy_stderr, vendor.stderr)
                reader, writer = await _pipes(vendor.stdout, vendor.stdin)
                async with (
                    jsonrpc_lines(reader, writer) as (read, write, closed, _),
                    ClientSession(read, write) as session,
                ):
                    with anyio.fail_after(self.start_timeout_s):
                        await session.initialize()
                        tools = await _all_tools(session)
                    self.session, self.tools, self.state = session, tools, "up"
                    self._closed = closed
                    task_status.started()
                    await closed.wait()
                tg.cancel_scope.cancel()
        finally:
            self.session = None
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(vendor.kill)
            for pipe in (vendor.stdin, vendor.stdout, vendor.stderr):
                with contextlib.suppress(OSError):
                    pipe.close()

    @property
    def status(self) -> str:
        """``state``, except that an incarnation whose connection has just ended is no longer
        up (its clean-up is under way)."""
        if self.state == "up" and self._closed is not None and self._closed.is_set():
            return "restarting" if self.restarts < self.restarts_max else "failed"
        return self.state

    async def wait_up(self, timeout_s: float) -> bool:
        """Whether the upstream is up, waiting at most ``timeout_s`` for a (re)start."""
        import anyio

        with anyio.move_on_after(timeout_s):
            while self.status in ("starting", "restarting"):
                await anyio.sleep(0.01)  # only while it is down: a rare, short wait
        return self.status == "up"

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        """The upstream's ``tools/call``; :class:`UpstreamDied` if it dies before answering."""
        import anyio

        session, closed = self.session, self._closed
        if session is None:
            raise UpstreamDied("the upstream is not running")
        result: list[Any] = []

        async def call() -> None:
            result.append(await session.call_tool(name, arguments))
            tg.cancel_scope.cancel()

        async def watch() -> None:
            await closed.wait()
            tg.cancel_scope.cancel()

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                tg.start_soon(watch)
        except Exception as exc:
            if closed.is_set():
                raise UpstreamDied("the upstream process exited during the call") from exc
            raise
        if not result:
            raise UpstreamDied("the upstream process exited during the call")
        return result[0]


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
        import mcp_types as types

        def text(message: str, error: bool) -> Any:
            return types.CallToolResult(content=[types.TextContent(text=message)], is_error=error)

        gs = self._session(ctx)
        if gs is None:
            self._count("blocked", "no_session")
            return text(
                f"{BLOCKED_PREFIX}: no MCP session (the shield counts calls per session; "
                "initialize a session first)",
                True,
            )
        if self.closing:
            self._count("blocked", "shutting_down")
            return text(f"{BLOCKED_PREFIX}: the gateway is shutting down; not forwarded", True)
        self.in_flight += 1
        try:
            return await self._guarded_call(gs, params, text)
        finally:
            self.in_flight -= 1

    def _count(self, outcome: str, reason: str = "") -> None:
        key = (outcome, reason)
        self.counts[key] = self.counts.get(key, 0) + 1

    def metrics(self) -> str:
        """Counters in the Prometheus text format: ``tools/call`` requests by outcome
        (``forwarded``, ``halt``, ``blocked`` by reason, ``upstream_error`` by cause), the
        upstream's restarts, whether it is up, and the sessions seen."""
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
            "# TYPE safecert_shield_sessions gauge",
            f"safecert_shield_sessions {len(self.sessions)}",
        ]
        return "\n".join(lines) + "\n"

    async def _guarded_call(self, gs: GuardSession, params: Any, text: Callable[..., Any]) -> Any:
        name, arguments = params.name, dict(params.arguments or {})
        if name != self.shield.halt and not await self.upstream.wait_up(
            self.upstream.start_timeout_s
        ):
            self._count("blocked", "upstream_unavailable")
            return text(
                f"{BLOCKED_PREFIX}: the upstream is {self.upstream.status}; not forwarded", True
            )
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
            why = "timed out" if isinstance(exc, TimeoutError) else _first_cause(exc)
            self._count("upstream_error", "timeout" if why == "timed out" else type(exc).__name__)
            return text(f"upstream call failed ({why}); session ended", True)
        if isinstance(out, Decision):
            if not out.allowed:
                self._count("blocked", _reason_kind(out.reason or ""))
                return text(out.message(), True)
            self._count("halt")
            return text(f"session halted after {gs.steps} executed calls", False)
        self._count("forwarded")
        return out


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
    upstream_start_timeout_s: float = 30.0
    upstream_restarts: int = 3
    grace_s: float = 2.0


def upstream_command(spec: str) -> list[str]:
    """The upstream command line (no shell); ``python`` means this interpreter."""
    return split_command(spec, field="upstream", example='"python tools_server.py"')


async def serve(shield: CertifiedShield, abstraction: Abstraction, opts: ServeOptions) -> int:
    """Start the upstream, then serve MCP on ``opts.transport`` until the stdio client leaves
    (0), a SIGTERM/SIGINT arrives (128 + the signal, after draining up to ``opts.grace_s``) or the
    upstream fails past its restart limit (:class:`UpstreamFailed`). The upstream process is
    stopped and reaped on every way out."""
    import anyio

    _mcp()
    upstream = Upstream(
        upstream_command(opts.upstream), str(Path.cwd()), opts.upstream_start_timeout_s,
        opts.upstream_restarts,
    )  # fmt: skip
    sinks = [JsonlSink(p) if p else None for p in (opts.steps_log, opts.audit_log)]
    stop = anyio.Event()
    signals: list[int] = []
    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        signals.append(signum)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    failed: list[UpstreamFailed] = []

    async def keep_upstream(*, task_status: Any) -> None:
        try:
            await upstream.run(task_status=task_status)
        except UpstreamFailed as exc:  # stop serving as cleanly as on a signal, then raise it
            failed.append(exc)
            stop.set()

    try:
        async with anyio.create_task_group() as tg:
            await tg.start(keep_upstream)
            gateway = Gateway(
                shield, abstraction, upstream, opts.on_block, sinks[0], sinks[1],
                opts.upstream_timeout_s,
            )  # fmt: skip
            print(
                f"safecert shield serve: {len(upstream.tools)} upstream tools behind the shield "
                f"of {shield.certificate_path} ({opts.transport})",
                file=sys.stderr,
                flush=True,
            )
            transport_done = anyio.Event()
            http: list[Any] = []
            busy: list[Callable[[], bool]] = []

            async def transport() -> None:
                try:
                    if opts.transport == "stdio":
                        await _serve_stdio(gateway.server(), busy)
                    else:
                        await _serve_http(gateway, opts.host, opts.port, http)
                finally:
                    transport_done.set()
                    stop.set()

            tg.start_soon(transport)
            await stop.wait()
            if signals:
                print(
                    f"safecert shield serve: {signal.Signals(signals[0]).name}; draining "
                    f"{gateway.in_flight} calls in flight (up to {opts.grace_s:g} s)",
                    file=sys.stderr,
                    flush=True,
                )
                await gateway.drain(
                    opts.grace_s, lambda: len(signals) > 1, lambda: any(b() for b in busy)
                )
            gateway.closing = True
            for server in http:  # uvicorn: close the listener, let answers go out, then the rest
                server.should_exit = True
            if http:
                with anyio.move_on_after(STOP_WAIT_S):
                    await transport_done.wait()
            tg.cancel_scope.cancel()
        if failed and not signals:
            raise failed[0]
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        for sink in sinks:
            if sink is not None:
                sink.close()
    return 128 + signals[0] if signals else 0


def _first_cause(exc: BaseException) -> str:
    """The innermost first error of an exception group, as ``Type: message``."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "no answer within the upstream start timeout"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def run(shield: CertifiedShield, abstraction: Abstraction, opts: ServeOptions) -> int:
    """:func:`serve` from synchronous code; the exit code (:data:`EXIT_CODES`). Raises
    :class:`ConfigError` when the upstream did not start, :class:`UpstreamFailed` past the
    restart limit."""
    import anyio

    try:
        return anyio.run(serve, shield, abstraction, opts)
    except BaseExceptionGroup as group:  # the task group's: the error it carries
        exc: BaseException = group
        while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
            exc = exc.exceptions[0]
        if isinstance(exc, SafecertError):
            raise exc from None
        raise


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


async def _serve_stdio(server: Any, busy: list[Callable[[], bool]]) -> None:
    """Serve one MCP connection on our stdin/stdout until the client closes either. The wire is
    moved to private descriptors and fd 0/1 are pointed at ``/dev/null``/stderr meanwhile, so stray
    prints of φ cannot corrupt it. Input that is no pipe, socket or terminal (a regular file) is
    read by the SDK's own transport instead. ``busy`` receives a test for requests whose response
    is not written yet (the drain waits for them too)."""
    wire_in, wire_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    saved = os.dup(0), os.dup(1)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    os.close(devnull)
    rf, wf = os.fdopen(wire_in, "rb", buffering=0), os.fdopen(wire_out, "wb", buffering=0)
    try:
        try:
            reader, writer = await _pipes(rf, wf)
        except ValueError:  # not a pipe: the SDK's threaded transport
            os.dup2(saved[0], 0)
            os.dup2(saved[1], 1)
            from mcp.server.stdio import stdio_server

            async with stdio_server() as (rs, ws):
                await server.run(rs, ws, server.create_initialization_options())
            return
        async with jsonrpc_lines(reader, writer) as (rs, ws, closed, unanswered):
            busy.append(lambda: unanswered[0] > 0)
            await server.run(rs, ws, server.create_initialization_options())
    finally:
        os.dup2(saved[0], 0)
        os.dup2(saved[1], 1)
        for fd in saved:
            os.close(fd)
        for f in (rf, wf):
            with contextlib.suppress(OSError):
                f.close()


async def _serve_http(gateway: Gateway, host: str, port: int, servers: list[Any]) -> None:
    """Streamable HTTP at ``/mcp`` and ``/healthz`` (200 while the upstream is up and the gateway
    is not shutting down, else 503; JSON body with the upstream's state). Signals are ours, not
    uvicorn's (:func:`serve` sets ``should_exit``)."""
    import uvicorn
    from starlette.responses import JSONResponse, PlainTextResponse
    from starlette.routing import Route

    async def healthz(request: Any) -> Any:
        upstream = gateway.upstream.status
        up = upstream == "up" and not gateway.closing
        body = {
            "status": "ok" if up else "unavailable",
            "upstream": upstream,
            "upstream_restarts": gateway.upstream.restarts,
            "closing": gateway.closing,
            "in_flight": gateway.in_flight,
            "sessions": len(gateway.sessions),
        }
        return JSONResponse(body, status_code=200 if up else 503)

    async def metrics(request: Any) -> Any:
        return PlainTextResponse(gateway.metrics(), media_type="text/plain; version=0.0.4")

    routes = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
    ]
    app = gateway.server().streamable_http_app(host=host, custom_starlette_routes=routes)

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Any:
            yield

    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", lifespan="on",
        timeout_graceful_shutdown=STOP_WAIT_S / 2,
    )  # fmt: skip
    server = Server(config)
    servers.append(server)
    await server.serve()
