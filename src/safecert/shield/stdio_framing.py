"""MCP's stdio framing — one JSON-RPC message per line — over asyncio pipes, for both sides of the
gateway: its own stdin/stdout (the client) and the upstream process's pipes.

Nothing here blocks a thread, so cancelling a reader or writer ends it at once (the SDK's own stdio
transport parks a worker thread in a blocking read, which cannot be cancelled). An ``intercept``
sees every line parsed once (by ``orjson``) before the SDK does and may take it over: the gateway's
raw ``tools/call`` path (:mod:`safecert.shield.gateway`) on both sides. It sees each line as the
pipe delivers it (:class:`LineReader`, in the transport's callback), so a taken line costs no
event-loop iteration and no task wake-up before it is acted on.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

LINE_LIMIT = 64 * 1024 * 1024  # the longest JSON-RPC line read (bytes)


def _never() -> bool:
    return False


class LineReader(asyncio.StreamReader):
    """A :class:`asyncio.StreamReader` that offers each complete line to a ``take`` test (set by
    :meth:`offer`) as soon as it arrives, in the transport's callback; a line ``take`` declines
    goes on to :meth:`readline` as without it, in order. A line longer than the limit is not
    offered: everything from it on goes to :meth:`readline`, which raises as a plain reader
    would.

    Back-pressure: while the ``hold`` test given to :meth:`offer` is true, no further line is
    offered — the rest of what arrived is kept as bytes and the pipe is no longer read (the
    writer's own writes block once the pipe is full) — until :meth:`release` finds it false.
    ``queued`` counts the declined lines that :meth:`readline` has not returned yet."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit=limit)
        self._take: Callable[[bytes], bool] | None = None
        self._hold: Callable[[], bool] = _never
        self._partial = bytearray()
        self._held = bytearray()  # arrived, not offered yet (while held)
        self._holding = False
        self._eof_held = False
        self._pipe: Any = None  # the read transport: paused while held
        self.queued = 0

    def set_transport(self, transport: asyncio.BaseTransport) -> None:
        super().set_transport(transport)
        self._pipe = transport

    def offer(self, take: Callable[[bytes], bool], hold: Callable[[], bool] = _never) -> None:
        """Offer every line to ``take`` from now on, those read already and not yet consumed
        included; while ``hold()`` is true, offer none (class docstring)."""
        buffered = bytes(self._buffer)  # type: ignore[attr-defined]  # (StreamReader's own)
        self._buffer.clear()  # type: ignore[attr-defined]
        self._take = take
        self._hold = hold
        self._lines(buffered)

    def feed_data(self, data: bytes) -> None:  # type: ignore[override]  # (pipes give bytes)
        if self._holding:  # (a read that was under way when the pipe was paused)
            self._held += data
        elif self._take is None:
            super().feed_data(data)
        else:
            self._lines(data)

    def release(self) -> None:
        """Offer what was held back and read the pipe again, unless ``hold()`` is still true."""
        if not self._holding or self._hold():
            return
        self._holding = False
        held = bytes(self._held)
        self._held.clear()
        self._lines(held)
        if self._holding:
            return
        if self._pipe is not None:
            self._pipe.resume_reading()
        if self._eof_held:
            self._eof_held = False
            self.feed_eof()

    async def readline(self) -> bytes:
        line = await super().readline()
        if self.queued:
            self.queued -= 1
        return line

    def _lines(self, data: bytes) -> None:
        """Offer each line ``data`` completes, until ``hold()``; keep the rest. Linear in what
        arrives: only new bytes are searched for a newline, and a long line grows in place (a
        48 MB line in 64 kB chunks took 16 s when each chunk was joined to the whole partial
        line and searched)."""
        take = self._take
        if take is None:  # a line over the limit came: everything goes to readline()
            super().feed_data(data)
            return
        partial = self._partial
        start = 0
        while (end := data.find(b"\n", start)) >= 0:
            if self._hold():
                self._holding = True
                self._held += data[start:]
                if self._pipe is not None:
                    self._pipe.pause_reading()
                return
            if partial:
                partial += data[start : end + 1]
                line = bytes(partial)
                partial.clear()
            else:
                line = data[start : end + 1]
            start = end + 1
            if not take(line):
                self.queued += 1
                super().feed_data(line)
        if start < len(data):
            partial += data[start:]
            if len(partial) > LINE_LIMIT:  # too long a line: readline() reports it
                self._take = None
                super().feed_data(bytes(partial))
                partial.clear()

    def feed_eof(self) -> None:
        if self._holding:
            self._eof_held = True
            return
        rest = bytes(self._partial)
        self._partial.clear()
        if rest and (self._take is None or not self._take(rest)):
            self.queued += 1
            super().feed_data(rest)  # a last line without its newline
        super().feed_eof()


class Wire:
    """What :func:`jsonrpc_lines` knows of its connection, and the raw way to write to it.

    Requests in flight: ``unanswered`` (handed to the SDK, response not written yet), ``taken``
    (taken by the ``intercept``, counted by its owner: :meth:`took`, :meth:`finished`) and the
    lines waiting for the SDK. With a ``limit``, no further line is read while they are ``limit``
    or more (:meth:`full`)."""

    def __init__(
        self, writer: asyncio.StreamWriter, closed: Any, reader: LineReader, limit: int | None
    ) -> None:
        self.unanswered = 0  # requests handed to the SDK not yet answered or settled unanswered
        self.taken = 0  # requests taken by the intercept that have not finished
        self.initialized = False  # a successful response to ``initialize`` has been written
        self.init_ids: set[Any] = set()
        self.limit = limit
        self._writer = writer
        self._closed = closed
        self._reader = reader

    @property
    def in_flight(self) -> int:
        """Requests read from the peer and not finished (class docstring)."""
        return self.unanswered + self.taken + self._reader.queued

    def full(self) -> bool:
        """Whether ``limit`` requests are in flight: no further line is read meanwhile."""
        return self.limit is not None and self.in_flight >= self.limit

    def took(self) -> None:
        """One request taken by the intercept (called as it is taken)."""
        self.taken += 1

    def answered(self) -> None:
        """One request handed to the SDK has settled (its response written, or none will be: a
        request the client cancelled): reading goes on if it waited."""
        self.unanswered -= 1
        self._reader.release()

    def finished(self) -> None:
        """One request taken by the intercept has finished: reading goes on if it waited."""
        self.taken -= 1
        self._reader.release()

    async def send(self, message: Any) -> None:
        """Write one JSON-RPC message (a dict) as a line, outside the SDK, and wait until the pipe
        took it (:meth:`write`, then :meth:`drain`)."""
        self.write(message)
        await self.drain()

    def write(self, message: Any) -> None:
        """Write one JSON-RPC message (a dict) as a line, outside the SDK, without waiting: what
        the pipe does not take at once waits in the transport's buffer (:meth:`drain` waits for
        it). Callable from a data callback. A peer that stopped reading ends the connection (as
        for the SDK's writes)."""
        try:
            self._writer.write(orjson.dumps(message, option=orjson.OPT_APPEND_NEWLINE))
        except (OSError, RuntimeError):
            self._closed.set()

    async def drain(self) -> None:
        """Wait until the pipe took what was written (back-pressure from a slow reader)."""
        try:
            await self._writer.drain()
        except (OSError, RuntimeError):
            self._closed.set()


@contextlib.asynccontextmanager
async def jsonrpc_lines(
    reader: LineReader,
    writer: asyncio.StreamWriter,
    intercept: Callable[[Wire], Callable[[Any], bool]] | None = None,
    max_in_flight: int | None = None,
) -> AsyncIterator[tuple[Any, Any, Any, Wire]]:
    """MCP's stdio framing (one JSON-RPC message per line) over an asyncio pipe pair, as the
    ``(read_stream, write_stream)`` an MCP session takes, an event set at end of input or when
    the peer stops reading, and the connection's :class:`Wire` (requests unanswered, whether
    ``initialize`` succeeded, raw writes). Nothing blocks a thread, so cancelling it ends it at
    once.

    ``intercept(wire)``, called once, gives a test that is called on the loop with each line
    parsed as JSON (``None`` when ``orjson`` cannot parse it) as it arrives, before the SDK sees
    it; when it returns true the line is taken (the SDK never sees it), else it goes to the SDK
    exactly as without an ``intercept``.

    ``max_in_flight`` bounds the requests of the peer in flight (:class:`Wire`): at that many, no
    further line is read until one finishes — back-pressure through the pipe, so what a peer
    that writes without reading costs stays bounded and nothing it sent is refused or lost."""
    import anyio
    import mcp_types as types
    from mcp.shared._context_streams import create_context_streams
    from mcp.shared.message import ServerMessageMetadata, SessionMessage

    in_send, in_recv = create_context_streams[SessionMessage | Exception](0)
    out_send, out_recv = create_context_streams[SessionMessage](0)
    closed = anyio.Event()
    wire = Wire(writer, closed, reader, max_in_flight)
    take = intercept(wire) if intercept is not None else None
    if take is not None or max_in_flight is not None:

        def offered(line: bytes) -> bool:
            if take is None:
                return False
            try:
                parsed = orjson.loads(line)
            except orjson.JSONDecodeError:
                parsed = None
            return take(parsed)

        reader.offer(offered, wire.full)

    async def settled() -> None:
        wire.answered()

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
                    if isinstance(msg.message, types.JSONRPCRequest):
                        wire.unanswered += 1  # until answered, or settled unanswered:
                        # the SDK never answers a request its client cancelled
                        msg.metadata = ServerMessageMetadata(on_request_unanswered=settled)
                        if msg.message.method == "initialize":
                            wire.init_ids.add(msg.message.id)
                await in_send.send(msg)
                reader.release()  # (a line read that was no request is finished)
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
                        wire.answered()
                        if m.message.id in wire.init_ids:  # the answer to ``initialize``
                            wire.init_ids.discard(m.message.id)
                            if isinstance(m.message, types.JSONRPCResponse):
                                wire.initialized = True
        except (OSError, RuntimeError, anyio.ClosedResourceError):
            pass  # the peer stopped reading
        finally:
            closed.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        tg.start_soon(write)
        try:
            yield in_recv, out_send, closed, wire
        finally:
            tg.cancel_scope.cancel()
            writer.close()


async def pipes(read_file: Any, write_file: Any) -> tuple[LineReader, Any]:
    loop = asyncio.get_running_loop()
    reader = LineReader(limit=LINE_LIMIT)
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
