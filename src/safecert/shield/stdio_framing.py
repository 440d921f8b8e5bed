"""MCP's stdio framing — one JSON-RPC message per line — over asyncio pipes, for both sides of the
gateway: its own stdin/stdout (the client) and the upstream process's pipes.

Nothing here blocks a thread, so cancelling a reader or writer ends it at once (the SDK's own stdio
transport parks a worker thread in a blocking read, which cannot be cancelled).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from typing import Any

LINE_LIMIT = 64 * 1024 * 1024  # the longest JSON-RPC line read (bytes)


@contextlib.asynccontextmanager
async def jsonrpc_lines(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> AsyncIterator[tuple[Any, Any, Any, list[int]]]:
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


async def pipes(read_file: Any, write_file: Any) -> tuple[asyncio.StreamReader, Any]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=LINE_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), read_file)
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, write_file
    )
    return reader, asyncio.StreamWriter(transport, protocol, None, loop)


async def copy_stderr(pipe: Any) -> None:
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
