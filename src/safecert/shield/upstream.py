"""The upstream MCP server process behind the gateway, kept running (restarted with backoff).

One incarnation at a time runs under :class:`safecert.procs.VendorProcess`: a process group of its
own, a subreaper that takes its subtree down, a parent-death signal (``kill -9`` of the gateway
takes it down). When it dies it is restarted with exponential backoff, at most ``restarts_max``
times; a call in flight gets :class:`UpstreamDied`; past the limit :meth:`Upstream.run` raises
:class:`UpstreamFailed`. Start-up (``initialize`` and ``tools/list``) has its own deadline,
``start_timeout_s``, separate from the per-call one.

The handshake and the tool list go through the MCP SDK's client; ``tools/call`` does not: it is
written as one JSON-RPC line with an id of our own (``safecert-N``, which the SDK's integer ids
never equal) and its answer is taken off the upstream's output before the SDK would parse it
(:meth:`Upstream.call_tool`), so a call costs one ``orjson`` round and one validation of the result.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from safecert.errors import ConfigError, SafecertError
from safecert.shield.stdio_framing import copy_stderr, jsonrpc_lines, pipes
from safecert.usercode import split_command

BACKOFF_S = (0.1, 5.0)  # first restart delay, doubled per consecutive restart up to the cap
RAW_ID = "safecert-"  # the prefix of the ids of our own tools/call requests


class UpstreamFailed(SafecertError):
    """The upstream died more often than ``upstream_restarts`` allows."""


class UpstreamDied(ConnectionError):
    """The upstream process ended while a call was in flight."""


class UpstreamError(Exception):
    """The upstream answered a ``tools/call`` with a JSON-RPC error or a malformed result."""


@dataclass(frozen=True)
class ToolReply:
    """The upstream's answer to one ``tools/call``: the result as it came (JSON) and the SDK's
    ``CallToolResult`` validated from it."""

    json: dict[str, Any]
    result: Any


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
    _wire: Any = None  # the running incarnation's stdio_framing.Wire
    _pending: dict[str, tuple[asyncio.Future[ToolReply], Any]] = field(default_factory=dict)
    _ids: Any = field(default_factory=itertools.count)

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
                            f"({first_cause(exc)})",
                            field="upstream",
                        ) from None
                    why = first_cause(exc)
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
                tg.start_soon(copy_stderr, vendor.stderr)
                reader, writer = await pipes(vendor.stdout, vendor.stdin)
                lines = jsonrpc_lines(reader, writer, lambda _: self._take_reply)
                async with (
                    lines as (read, write, closed, wire),
                    ClientSession(read, write) as session,
                ):
                    with anyio.fail_after(self.start_timeout_s):
                        await session.initialize()
                        tools = await _all_tools(session)
                    self.session, self.tools, self.state = session, tools, "up"
                    self._closed, self._wire = closed, wire
                    task_status.started()
                    await closed.wait()
                    self._fail_pending()
                tg.cancel_scope.cancel()
        finally:
            self.session = self._wire = None
            self._fail_pending()
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

        if self.status == "up":
            return True
        with anyio.move_on_after(timeout_s):
            while self.status in ("starting", "restarting"):
                await anyio.sleep(0.01)  # only while it is down: a rare, short wait
        return self.status == "up"

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        timeout_s: float,
        early: Callable[[ToolReply], None] | None = None,
    ) -> ToolReply:
        """The upstream's ``tools/call`` result, as it came and validated, within ``timeout_s``
        (writing the request included). Raises :class:`TimeoutError` past it,
        :class:`UpstreamDied` if the upstream is down or dies before answering,
        :class:`UpstreamError` for a JSON-RPC error or a malformed result. Cancelling the await
        (or the deadline) forgets the call (a late answer is dropped). ``early``, when given, is
        called with a valid result as soon as it is read, in the upstream pipe's data callback —
        before this await resumes, one event-loop iteration sooner; if it raises, so does this
        call.

        The deadline is one timer on the loop that fails the answer (a third of what
        ``asyncio.timeout`` costs). The request is written without waiting for the pipe to take
        it: its bytes wait in the transport's buffer either way, and the answer, which cannot
        come before them, is what is waited for."""
        wire, closed = self._wire, self._closed
        if wire is None or closed is None or closed.is_set():
            raise UpstreamDied("the upstream is not running")
        rid = f"{RAW_ID}{next(self._ids)}"
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[ToolReply] = loop.create_future()
        self._pending[rid] = (answer, early)
        expiry = loop.call_at(loop.time() + timeout_s, _expire, answer)
        try:
            request = {"name": name, "arguments": arguments}
            wire.write({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": request})
            return await answer
        finally:
            expiry.cancel()
            self._pending.pop(rid, None)

    def _take_reply(self, message: Any) -> bool:
        """The upstream's output, parsed: an answer to one of our ``tools/call`` requests is taken
        (validated, and given to its caller if it still waits: ``early`` first); anything else
        goes to the SDK's client."""
        if type(message) is not dict or "method" in message:
            return False
        rid = message.get("id")
        if not (isinstance(rid, str) and rid.startswith(RAW_ID)):
            return False
        pending = self._pending.pop(rid, None)
        if pending is None or pending[0].done():
            return True
        answer, early = pending
        try:
            reply = _tool_reply(message)
            if early is not None:
                early(reply)
        except Exception as exc:  # (in the pipe's callback: never raised there)
            answer.set_exception(exc)
        else:
            answer.set_result(reply)
        return True

    def _fail_pending(self) -> None:
        """The connection ended: every call waiting for an answer gets :class:`UpstreamDied`."""
        pending, self._pending = self._pending, {}
        for answer, _ in pending.values():
            if not answer.done():
                answer.set_exception(UpstreamDied("the upstream process exited during the call"))


def _expire(answer: asyncio.Future[Any]) -> None:
    """A call's deadline passed (a timer on the loop)."""
    if not answer.done():
        answer.set_exception(TimeoutError())


def _tool_reply(message: dict[str, Any]) -> ToolReply:
    """The ``tools/call`` result of a JSON-RPC answer, validated; :class:`UpstreamError` for a
    JSON-RPC error or a malformed result."""
    import mcp_types as types

    error, result = message.get("error"), message.get("result")
    if error is not None or not isinstance(result, dict):
        raise UpstreamError(
            f"JSON-RPC error {error}" if error is not None else "an answer without a result"
        )
    try:
        return ToolReply(result, types.CallToolResult.model_validate(result))
    except ValueError as exc:
        raise UpstreamError(f"a malformed tools/call result ({first_cause(exc)})") from None


def upstream_command(spec: str) -> list[str]:
    """The upstream command line (no shell); ``python`` means this interpreter."""
    return split_command(spec, field="upstream", example='"python tools_server.py"')


def first_cause(exc: BaseException) -> str:
    """The innermost first error of an exception group, as ``Type: message``."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "no answer within the upstream start timeout"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


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
