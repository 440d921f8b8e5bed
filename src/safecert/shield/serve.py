"""``safecert shield serve``: run the :class:`safecert.shield.gateway.Gateway` on stdio or HTTP.

Lifecycle (:func:`serve`; exit codes in :data:`EXIT_CODES`): the upstream is started and kept
running by :class:`safecert.shield.upstream.Upstream` (restarts with backoff; calls in flight end
their sessions with a tool error, calls arriving meanwhile are refused without being forwarded, and
past the limit the gateway exits with :data:`EXIT_UPSTREAM`). SIGTERM or SIGINT stops new calls,
waits for the calls in flight up to ``grace_s``, stops the upstream and exits with 128 + the
signal; a second signal skips the wait. End of the stdio client's input (or a closed output) is a
normal end: exit 0. Over HTTP ``/healthz`` answers 200 while the upstream is up and 503 otherwise;
``/metrics`` gives the gateway's counters in the Prometheus text format.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from safecert.errors import SafecertError
from safecert.extras import MissingExtraError
from safecert.shield.certified import CertifiedShield
from safecert.shield.gateway import Gateway
from safecert.shield.session import Abstraction, JsonlSink, OnBlock
from safecert.shield.stdio_framing import jsonrpc_lines, pipes
from safecert.shield.upstream import Upstream, UpstreamFailed, upstream_command

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
STOP_WAIT_S = 1.5  # after the grace period: how long the transport gets to close
#: requests of one stdio connection in flight (read, not yet finished) before the gateway stops
#: reading its input until one finishes (back-pressure through the pipe)
STDIO_MAX_IN_FLIGHT = 64
#: requests in flight over HTTP, all sessions together; past it, a request is answered 503
HTTP_MAX_IN_FLIGHT = 1024


def _mcp() -> Any:
    try:
        import mcp
    except ImportError:
        raise MissingExtraError("mcp", "agents") from None
    return mcp


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
                        await _serve_stdio(gateway, busy)
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


def run(shield: CertifiedShield, abstraction: Abstraction, opts: ServeOptions) -> int:
    """:func:`serve` from synchronous code; the exit code (:data:`EXIT_CODES`). Raises
    :class:`~safecert.errors.ConfigError` when the upstream did not start,
    :class:`UpstreamFailed` past the restart limit."""
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


async def _serve_stdio(gateway: Gateway, busy: list[Callable[[], bool]]) -> None:
    """Serve one MCP connection on our stdin/stdout until the client closes either, ``tools/call``
    on the gateway's raw path (:meth:`Gateway.stdio_intercept`), the rest through the SDK. The
    wire is moved to private descriptors and fd 0/1 are pointed at ``/dev/null``/stderr
    meanwhile, so stray prints of φ cannot corrupt it. Input that is no pipe, socket or terminal
    (a regular file) is read by the SDK's own transport instead. ``busy`` receives a test for
    requests whose response is not written yet (the drain waits for them too)."""
    import anyio

    server = gateway.server()
    wire_in, wire_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    saved = os.dup(0), os.dup(1)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    os.close(devnull)
    rf, wf = os.fdopen(wire_in, "rb", buffering=0), os.fdopen(wire_out, "wb", buffering=0)
    try:
        try:
            reader, writer = await pipes(rf, wf)
        except ValueError:  # not a pipe: the SDK's threaded transport
            os.dup2(saved[0], 0)
            os.dup2(saved[1], 1)
            from mcp.server.stdio import stdio_server

            async with stdio_server() as (rs, ws):
                await server.run(rs, ws, server.create_initialization_options())
            return
        with anyio.CancelScope() as scope:
            calls = _Calls(scope.cancel)

            def intercept(wire: Any) -> Callable[[Any], bool]:
                return gateway.stdio_intercept(wire, calls.spawn)

            try:
                lines = jsonrpc_lines(reader, writer, intercept, STDIO_MAX_IN_FLIGHT)
                async with lines as (rs, ws, closed, wire):
                    busy.append(lambda: wire.unanswered > 0)
                    await server.run(rs, ws, server.create_initialization_options())
                    # the client left: a call it was answered already may still be evaluating
                    # φ of its new history (its step is logged then); bounded by φ's deadline
                    await gateway.drain(gateway.abstraction.timeout_s)
            finally:
                await calls.close()
    finally:
        os.dup2(saved[0], 0)
        os.dup2(saved[1], 1)
        for fd in saved:
            os.close(fd)
        for f in (rf, wf):
            with contextlib.suppress(OSError):
                f.close()


class _Calls:
    """The tasks of a stdio connection's raw ``tools/call`` path: plain asyncio tasks (an anyio
    task group's start costs several times as much CPU, on every call), cancelled together by
    :meth:`close`; as in a task group, one that fails cancels the connection (``stop``) and its
    exception is raised by :meth:`close`."""

    def __init__(self, stop: Callable[[], Any]) -> None:
        self.tasks: set[asyncio.Task[Any]] = set()
        self.failed: list[BaseException] = []
        self._stop = stop

    def spawn(self, fn: Callable[..., Any], *args: Any) -> None:
        task = asyncio.get_running_loop().create_task(fn(*args))
        self.tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.failed.append(task.exception())  # type: ignore[arg-type]
            self._stop()

    async def close(self) -> None:
        """Cancel the calls still running, wait for them, raise the first failure."""
        import anyio

        with anyio.CancelScope(shield=True):
            while self.tasks:  # (a call that ends lets a held line in: it is cancelled unstarted)
                for task in list(self.tasks):
                    task.cancel()
                await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.failed:
            raise self.failed[0]


async def _serve_http(gateway: Gateway, host: str, port: int, servers: list[Any]) -> None:
    """Streamable HTTP at ``/mcp`` (each POST answered with one JSON response, not an SSE
    stream), ``/healthz`` (200 while the upstream is up and the gateway is not shutting down, else
    503; JSON body with the upstream's state) and ``/metrics``. Signals are ours, not uvicorn's
    (:func:`serve` sets ``should_exit``)."""
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
    # one JSON response per POST: the gateway streams nothing during a call (it passes on no
    # progress, log or request of the upstream), and SSE framing costs a quarter of its CPU
    app = gateway.server().streamable_http_app(
        host=host, custom_starlette_routes=routes, json_response=True
    )

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Any:
            yield

    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", lifespan="on",
        # (typed int, used as asyncio's float timeout)
        timeout_graceful_shutdown=STOP_WAIT_S / 2,  # type: ignore[arg-type]
        limit_concurrency=HTTP_MAX_IN_FLIGHT,
    )  # fmt: skip
    server = Server(config)
    servers.append(server)
    await server.serve()
